"""Where the cluster's users and groups are written: the LDAP directory the nodes resolve
through NSS, or local accounts on the nodes the platform manages (sites without a directory).

Both answer the same few questions and make the same few writes; the services in
apps/identity/services.py decide what to write. Names and numbers are validated before they
get here (services.py); values reach LDAP only as escaped DN parts and attribute values, and
local commands only as argv items.
"""

import contextlib
import grp
import pwd
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Protocol

import ldap
import ldap.dn
import ldap.filter
import ldap.modlist
from django.conf import settings

from apps.core.exceptions import DirectoryUnavailable
from apps.identity import privileged


@dataclass(frozen=True)
class Entry:
    name: str
    number: int  # uidNumber or gidNumber
    members: tuple[str, ...] = ()  # a group's memberUid


class Directory(Protocol):
    def find_user(self, name: str) -> Entry | None: ...

    def find_group(self, name: str) -> Entry | None: ...

    def highest(self, kind: str, *, low: int, high: int) -> int | None:
        """The highest uid ("uid") or gid ("gid") in [low, high] the directory holds."""

    def add_user(
        self, *, name: str, uid: int, gid: int, full_name: str, email: str, password: str | None
    ) -> None:
        """A user and their private group (same name, gid)."""

    def set_password(self, *, name: str, password: str) -> None: ...

    def add_group(self, *, name: str, gid: int) -> None: ...

    def remove_group(self, *, name: str) -> None:
        """The group's entry removed (a purge; a retired gid); a missing one is success."""

    def set_members(self, *, name: str, members: list[str]) -> None: ...


class LdapDirectory:
    """OpenLDAP: ou=people (inetOrgPerson + posixAccount), ou=groups (posixGroup)."""

    def __init__(self):
        base = settings.TORUS_LDAP_BASE_DN
        self.people, self.groups = f"ou=people,{base}", f"ou=groups,{base}"

    def _connect(self):
        try:
            password = Path(settings.TORUS_LDAP_BIND_PASSWORD_FILE).read_text().strip()
        except OSError as exc:
            raise DirectoryUnavailable(f"cannot read the directory's password: {exc}") from exc
        conn = ldap.initialize(settings.TORUS_LDAP_URL)
        conn.set_option(ldap.OPT_NETWORK_TIMEOUT, 3)
        conn.set_option(ldap.OPT_TIMEOUT, 10)
        try:
            conn.simple_bind_s(settings.TORUS_LDAP_BIND_DN, password)
        except ldap.LDAPError as exc:
            raise DirectoryUnavailable(f"directory at {settings.TORUS_LDAP_URL}: {exc}") from exc
        return conn

    def _run(self, fn):
        conn = self._connect()
        try:
            return fn(conn)
        except (ldap.SERVER_DOWN, ldap.TIMEOUT, ldap.CONNECT_ERROR) as exc:
            raise DirectoryUnavailable(f"directory at {settings.TORUS_LDAP_URL}: {exc}") from exc
        finally:
            conn.unbind_s()

    def _dn(self, branch: str, attr: str, name: str) -> str:
        return f"{attr}={ldap.dn.escape_dn_chars(name)},{branch}"

    def _find(self, branch: str, object_class: str, attr: str, number_attr: str, name: str):
        query = ldap.filter.filter_format(f"(&(objectClass={object_class})({attr}=%s))", [name])

        def search(conn):
            found = conn.search_s(branch, ldap.SCOPE_ONELEVEL, query, [number_attr, "memberUid"])
            for _, attrs in found:
                members = tuple(m.decode() for m in attrs.get("memberUid", []))
                return Entry(name=name, number=int(attrs[number_attr][0]), members=members)
            return None

        return self._run(search)

    def find_user(self, name: str) -> Entry | None:
        return self._find(self.people, "posixAccount", "uid", "uidNumber", name)

    def find_group(self, name: str) -> Entry | None:
        return self._find(self.groups, "posixGroup", "cn", "gidNumber", name)

    def highest(self, kind: str, *, low: int, high: int) -> int | None:
        branch, attr = (self.people, "uidNumber") if kind == "uid" else (self.groups, "gidNumber")
        query = f"({attr}>={low})"  # numbers only: nothing a user wrote

        def search(conn):
            found = conn.search_s(branch, ldap.SCOPE_ONELEVEL, query, [attr])
            numbers = [int(attrs[attr][0]) for _, attrs in found if attr in attrs]
            numbers = [n for n in numbers if low <= n <= high]
            return max(numbers, default=None)

        return self._run(search)

    def add_user(self, *, name, uid, gid, full_name, email, password) -> None:
        person = {
            "objectClass": [b"inetOrgPerson", b"posixAccount", b"shadowAccount"],
            "uid": [name.encode()],
            "cn": [(full_name or name).encode()],
            "sn": [(full_name.split()[-1] if full_name.strip() else name).encode()],
            "uidNumber": [str(uid).encode()],
            "gidNumber": [str(gid).encode()],
            "homeDirectory": [b"/nonexistent"],
            "loginShell": [b"/bin/bash"],
        }
        if email:
            person["mail"] = [email.encode()]
        group = {
            "objectClass": [b"posixGroup"],
            "cn": [name.encode()],
            "gidNumber": [str(gid).encode()],
        }

        def add(conn):
            conn.add_s(self._dn(self.groups, "cn", name), ldap.modlist.addModlist(group))
            conn.add_s(self._dn(self.people, "uid", name), ldap.modlist.addModlist(person))
            if password:  # the server stores it hashed (password modify operation)
                conn.passwd_s(self._dn(self.people, "uid", name), None, password)

        self._run(add)

    def set_password(self, *, name: str, password: str) -> None:
        dn = self._dn(self.people, "uid", name)
        self._run(lambda conn: conn.passwd_s(dn, None, password))

    def add_group(self, *, name: str, gid: int) -> None:
        group = {"objectClass": [b"posixGroup"], "cn": [name.encode()]}
        group["gidNumber"] = [str(gid).encode()]
        dn = self._dn(self.groups, "cn", name)
        self._run(lambda conn: conn.add_s(dn, ldap.modlist.addModlist(group)))

    def remove_group(self, *, name: str) -> None:
        dn = self._dn(self.groups, "cn", name)

        def remove(conn):
            with contextlib.suppress(ldap.NO_SUCH_OBJECT):
                conn.delete_s(dn)

        self._run(remove)

    def set_members(self, *, name: str, members: list[str]) -> None:
        dn = self._dn(self.groups, "cn", name)
        values = [m.encode() for m in sorted(set(members))]
        change = [(ldap.MOD_REPLACE, "memberUid", values or None)]
        self._run(lambda conn: conn.modify_s(dn, change))


class LocalDirectory:
    """Local accounts (/etc/passwd, /etc/group) on the machine the platform manages, made by
    the privileged helper (groupadd, useradd, chpasswd, gpasswd: names and numbers of the
    ranges only); a site with several nodes and no directory runs the same on each
    (docs/security.md)."""

    def _run(self, call, **arguments) -> None:
        """One local-account verb of the privileged helper (the platform is not root)."""
        try:
            call(**arguments)
        except privileged.HelperError as exc:
            raise DirectoryUnavailable(f"local accounts: {exc}") from exc

    def find_user(self, name: str) -> Entry | None:
        try:
            return Entry(name=name, number=pwd.getpwnam(name).pw_uid)
        except KeyError:
            return None

    def find_group(self, name: str) -> Entry | None:
        try:
            found = grp.getgrnam(name)
            return Entry(name=name, number=found.gr_gid, members=tuple(found.gr_mem))
        except KeyError:
            return None

    def highest(self, kind: str, *, low: int, high: int) -> int | None:
        numbers = (
            [p.pw_uid for p in pwd.getpwall()]
            if kind == "uid"
            else [g.gr_gid for g in grp.getgrall()]
        )
        return max((n for n in numbers if low <= n <= high), default=None)

    def add_user(self, *, name, uid, gid, full_name, email, password) -> None:
        comment = "".join(c if c.isprintable() else " " for c in (full_name or name))[:128]
        self._run(privileged.local_user_add, name=name, uid=uid, gid=gid, comment=comment)
        if password:
            self.set_password(name=name, password=password)

    def set_password(self, *, name: str, password: str) -> None:
        self._run(privileged.local_password_set, name=name, password=password)

    def add_group(self, *, name: str, gid: int) -> None:
        self._run(privileged.local_group_add, name=name, gid=gid)

    def remove_group(self, *, name: str) -> None:
        self._run(privileged.local_group_remove, name=name)

    def set_members(self, *, name: str, members: list[str]) -> None:
        self._run(privileged.local_members_set, name=name, members=sorted(set(members)))


@cache
def _directories() -> dict[str, Directory]:
    return {"ldap": LdapDirectory(), "local": LocalDirectory()}


def directory() -> Directory:
    """The configured directory (TORUS_IDENTITY_BACKEND)."""
    return _directories()[settings.TORUS_IDENTITY_BACKEND]
