"""`torus login`, `logout` and `profiles`: platforms and their tokens in the config file."""

from __future__ import annotations

import getpass
import os
import sys

from torus.client import Client
from torus.config import check_profile_name, config_path, read_config, write_config
from torus.errors import TorusError
from torus.output import emit


def _read_token(args) -> str:
    if args.login_token or args.token:
        return args.login_token or args.token
    if sys.stdin.isatty():
        return getpass.getpass("access token (torus token create, or the web UI): ").strip()
    return sys.stdin.readline().strip()  # piped: `... | torus login --url ...`


def _profile(args) -> str | None:
    return args.login_profile or args.profile or os.environ.get("TORUS_PROFILE")


def cmd_login(args) -> None:
    config = read_config()
    name = check_profile_name(_profile(args) or config["default"] or "default")
    saved = config["profiles"].get(name, {})
    url = args.login_url or args.url or os.environ.get("TORUS_URL") or saved.get("url") or ""
    url = url.rstrip("/")
    if not url:
        raise TorusError(f"profile {name!r} has no URL yet: give --url")
    token = _read_token(args)
    if not token:
        raise TorusError("no token given (--token, or type it when asked)")
    with Client(url=url, token=token) as client:  # checked before anything is saved
        me = client.me()
    config["profiles"][name] = {"url": url, "token": token}
    if args.set_default or not config["default"]:
        config["default"] = name
    path = write_config(config)
    if args.json:
        emit(args, {"profile": name, "url": url, "user": me["user"]["username"]})
        return
    print(f"signed in as {me['user']['username']} at {url} (profile {name}, saved in {path})")


def cmd_logout(args) -> None:
    config = read_config()
    name = _profile(args) or config["default"]
    if not name or name not in config["profiles"]:
        raise TorusError(f"no profile {name!r} in {config_path()}")
    config["profiles"][name].pop("token", None)
    write_config(config)
    if not args.json:
        print(
            f"token of profile {name} removed (the token itself stays valid: revoke it with "
            "`torus token revoke`)"
        )


def cmd_profiles(args) -> None:
    config = read_config()
    rows = [
        {
            "name": name,
            "url": values.get("url", ""),
            "token": "saved" if values.get("token") else "-",
            "default": "*" if name == config["default"] else "",
        }
        for name, values in sorted(config["profiles"].items())
    ]
    emit(args, rows, ["default", "name", "url", "token"])


def add_parsers(sub) -> None:
    login = sub.add_parser(
        "login",
        help="check a token against a platform and save both as a profile",
        description="The token is read from --token, or asked for (not echoed), or read from "
        "standard input when piped; it is checked with /api/v1/auth/me before it is saved.",
    )
    login.add_argument("--url", dest="login_url", help="the platform's URL")
    login.add_argument("--token", dest="login_token", help="an access token")
    login.add_argument("--profile", dest="login_profile", help="the profile to save")
    login.add_argument(
        "--default", dest="set_default", action="store_true", help="make it the default"
    )
    login.set_defaults(func=cmd_login, needs_client=False)
    logout = sub.add_parser("logout", help="forget the saved token of a profile")
    logout.add_argument("--profile", dest="login_profile", help="the profile")
    logout.set_defaults(func=cmd_logout, needs_client=False)
    sub.add_parser("profiles", help="the saved platforms").set_defaults(
        func=cmd_profiles, needs_client=False
    )
