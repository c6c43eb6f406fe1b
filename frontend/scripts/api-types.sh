#!/usr/bin/env bash
# What the UI knows of the API, generated, never written by hand: the types from the OpenAPI
# schema (manage.py spectacular, then openapi-typescript) and the role matrix
# (apps/tenancy/policies.py, so the UI hides what a role may not do).
#   scripts/api-types.sh          regenerate src/api/schema.d.ts and src/api/policy.json
#   scripts/api-types.sh --check  fail if the committed files differ from what the code says
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd -P)
root=$(cd "$here/.." && pwd -P)
python=${PYTHON:-$root/.venv/bin/python}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$root" && "$python" manage.py spectacular --format openapi-json --file "$tmp/openapi.json" 2>"$tmp/err") ||
  { cat "$tmp/err" >&2; exit 1; }
"$here/node_modules/.bin/openapi-typescript" "$tmp/openapi.json" -o "$tmp/schema.d.ts" >/dev/null
(cd "$root" && DJANGO_SETTINGS_MODULE=config.settings "$python" -c '
import json, django
django.setup()
from apps.tenancy.models import ROLE_RANK
from apps.tenancy.policies import MATRIX
print(json.dumps({
    "ranks": {str(r.value): n for r, n in ROLE_RANK.items()},
    "matrix": {f"{res}:{act}": str(role.value) for (res, act), role in sorted(MATRIX.items())},
}, indent=1))') >"$tmp/policy.json"
if [[ ${1:-} == --check ]]; then
  status=0
  for f in schema.d.ts policy.json; do
    if ! diff -q "$tmp/$f" "$here/src/api/$f" >/dev/null 2>&1; then
      echo "frontend/src/api/$f is out of date with the API: run frontend/scripts/api-types.sh" >&2
      diff -u "$here/src/api/$f" "$tmp/$f" | head -40 >&2 || true
      status=1
    fi
  done
  ((status == 0)) && echo "API types and role matrix match the code"
  exit $status
else
  cp "$tmp/schema.d.ts" "$tmp/policy.json" "$here/src/api/"
  echo "wrote src/api/schema.d.ts and src/api/policy.json"
fi
