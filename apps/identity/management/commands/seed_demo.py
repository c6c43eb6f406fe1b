"""Create (idempotently) two demo tenants with people and a project each, and print fresh tokens."""

import json

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction
from django.utils import timezone

from apps.identity.services import account_ensure
from apps.tenancy import services, token_cache
from apps.tenancy.models import AccessToken, Membership, Project, ProjectMember, Role, Tenant

DEMO_PASSWORD = "torus-demo-pass"
TOKEN_NAME = "seed-demo"
TENANTS = [
    {"slug": "acme", "name": "Acme Research", "project": ("vision", "Vision")},
    {"slug": "globex", "name": "Globex AI", "project": ("nlp", "Language models")},
]
ROLES = [Role.OWNER, Role.ADMIN, Role.MEMBER, Role.VIEWER]


class Command(BaseCommand):
    help = "Create the demo tenants, users and projects, and mint fresh API tokens for them."

    def add_arguments(self, parser):
        parser.add_argument("--json", action="store_true", help="print the result as JSON")

    @transaction.atomic
    def handle(self, *args, **options):
        result = {"password": DEMO_PASSWORD, "tenants": []}
        for spec in TENANTS:
            result["tenants"].append(self._seed_tenant(spec))
        if options["json"]:
            self.stdout.write(json.dumps(result, indent=2))
        else:
            for tenant in result["tenants"]:
                self.stdout.write(f"tenant {tenant['slug']} (project {tenant['project']['slug']})")
                for user in tenant["users"]:
                    self.stdout.write(f"  {user['role']:<7} {user['username']:<16} {user['token']}")
            self.stdout.write(f"password for every demo user: {DEMO_PASSWORD}")

    def _seed_tenant(self, spec: dict) -> dict:
        users = {role: self._user(f"{spec['slug']}-{role.value}") for role in ROLES}
        for user in users.values():  # the people, in the directory the cluster resolves
            account_ensure(user=user, password=DEMO_PASSWORD)
        tenant = Tenant.objects.filter(slug=spec["slug"]).first()
        if tenant is None:
            tenant = services.tenant_create(
                name=spec["name"], slug=spec["slug"], owner=users[Role.OWNER]
            )
        for role, user in users.items():
            Membership.objects.update_or_create(tenant=tenant, user=user, defaults={"role": role})
        project_slug, project_name = spec["project"]
        project, _ = Project.objects.get_or_create(
            tenant=tenant, slug=project_slug, defaults={"name": project_name}
        )
        if project.archived_at is not None:  # an admin's choice: kept, and said (never reused)
            self.stderr.write(
                f"note: project {tenant.slug}/{project.slug} is archived; restore it or purge it "
                "(docs/operations.md) for a working demo project"
            )
        ProjectMember.objects.get_or_create(project=project, user=users[Role.MEMBER])
        AccessToken.objects.filter(tenant=tenant, name=TOKEN_NAME, revoked_at__isnull=True).update(
            revoked_at=timezone.now()
        )
        token_cache.bump(tenant_ids=[tenant.pk])  # a bulk update sends no signal
        out_users = []
        for role, user in users.items():
            _, plaintext = services.token_create(
                actor=None, user=user, tenant=tenant, name=TOKEN_NAME
            )
            out_users.append({"username": user.username, "role": role.value, "token": plaintext})
        return {
            "id": str(tenant.id),
            "slug": tenant.slug,
            "name": tenant.name,
            "project": {"id": str(project.id), "slug": project.slug, "name": project.name},
            "users": out_users,
        }

    @staticmethod
    def _user(username: str):
        user, created = get_user_model().objects.get_or_create(
            username=username, defaults={"email": f"{username}@example.org"}
        )
        if created or not user.check_password(DEMO_PASSWORD):
            user.set_password(DEMO_PASSWORD)
            user.save()
        return user
