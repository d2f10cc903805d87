"""Who else may write a file or directory through its group or a POSIX ACL.

A mode with group write lets every member of the file's group rewrite it (or, for a directory,
rename what is in it away and put their own in its place). That is safe only where the group can
hold nobody else: Debian's OpenSSH (its user-group-modes patch) accepts group write only when the
group's one member is the file's owner, a *user-private group*. Here the members allowed are the
process's effective uid and root (root may write anything anyway), so root's own group counts as
private too when only root is in it. A group with no member at all is not private: such groups
belong to setgid programs, which give it to whoever runs them.

A POSIX access ACL may grant write to named users and groups. The kernel masks every such entry,
and the owning group's, by the ACL's mask, which is what the mode shows as group permissions: with
no group write in the mode, no ACL entry grants write either, and nothing here is read.

/etc/gshadow's members and administrators count as members, and a password there as an outsider,
where this process can read it (root, or group shadow): ``sg`` and ``newgrp`` let its members join
with no password though /etc/group does not list them. What this does not see: members that the
user database does not list (an NSS source that does not enumerate, such as LDAP without
enumeration, hides primary-group members), /etc/gshadow where this process may not read it, NFSv4 ACLs, the ACLs of systems other than Linux (macOS's are
not read), and the capabilities of another process.
"""
from __future__ import annotations

import errno
import os
import stat
import struct
from typing import NamedTuple

if os.name == "posix":
    import grp
    import pwd

ACL_XATTR = "system.posix_acl_access"
ACL_VERSION = 2
USER_OBJ, USER, GROUP_OBJ, GROUP, MASK, OTHER = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20
_TAGS = frozenset((USER_OBJ, USER, GROUP_OBJ, GROUP, MASK, OTHER))
_WRITE = 0o2


class AclEntry(NamedTuple):
    tag: int
    perm: int
    id: int | None  # the uid or gid of a named USER or GROUP entry; None for the others


class Writer(NamedTuple):
    """Someone other than this process's uid and root who may write a path, and how to stop it."""

    who: str  # e.g. "its group 'staff' (gid 50) may write it, and user 'alice' (uid 1001) is in it"
    fix: str  # a shell command, e.g. "chmod g-w /srv/keys"

    @property
    def note(self) -> str:
        """``": WHO"``, to follow a mode in a message; ``""`` when the mode says it all (world write)."""
        return f": {self.who}" if self.who else ""


def parse_acl(raw: bytes) -> list[AclEntry]:
    """The entries of a Linux ``system.posix_acl_access`` value: a little-endian 4-byte version
    (2), then 8 bytes per entry: tag (u16), permissions (u16), id (u32). Raises ValueError for any
    other shape, so that an ACL this code cannot read is never taken for one that grants nothing."""
    if len(raw) < 4 or (len(raw) - 4) % 8:
        raise ValueError(f"an access ACL of {len(raw)} bytes is not a 4-byte header and 8-byte entries")
    (version,) = struct.unpack_from("<I", raw)
    if version != ACL_VERSION:
        raise ValueError(f"access ACL version {version}, not {ACL_VERSION}")
    entries = []
    for tag, perm, ident in struct.iter_unpack("<HHI", raw[4:]):
        if tag not in _TAGS:
            raise ValueError(f"access ACL entry tag {tag:#x} is none of user, group, mask, other")
        entries.append(AclEntry(tag, perm, ident if tag in (USER, GROUP) else None))
    return entries


def read_acl(path: str) -> list[AclEntry] | None:
    """The access ACL of ``path`` (symlinks followed), or None when it has none or its file system
    holds none. Raises OSError for any other failure, and ValueError for an ACL it cannot parse."""
    if not hasattr(os, "getxattr"):  # Linux only: other systems' ACLs are not POSIX access ACLs in an xattr
        return None
    try:
        raw = os.getxattr(path, ACL_XATTR)
    except OSError as exc:
        if exc.errno in (errno.ENODATA, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOENT):
            return None
        raise
    return parse_acl(raw)


def outsider(gid: int, euid: int) -> str | None:
    """Why group ``gid`` may hold someone other than ``euid`` and root (naming one such member),
    or None when it is private to them: it has an entry, at least one member, and every member
    listed (in the member list of any group entry with this gid, or a user whose primary group it
    is) is ``euid`` or root."""
    try:
        grp.getgrgid(gid)
    except KeyError:
        return f"gid {gid} has no entry in the group database, so who is in it is unknown"
    trusted = (0, euid)
    members = 0
    # Every entry with this gid, not getgrgid's first: `groupadd -o` makes a second name for the
    # gid, and login (initgroups) gives the gid to the members of each.
    entries = [gr for gr in grp.getgrall() if gr.gr_gid == gid]
    listed = [name for gr in entries for name in gr.gr_mem]
    # /etc/gshadow lists members of its own, whom `sg` and `newgrp` let join with no password
    # though /etc/group does not name them, and administrators, who may add anyone (gpasswd).
    # Readable by root (or group shadow) only: read where it can be.
    for _, password, admins, joined in _gshadow({gr.gr_name for gr in entries}):
        if password and password[0] not in "!*":
            return f"its password in {GSHADOW} lets whoever knows it join it (newgrp)"
        listed += admins + joined
    for name in listed:
        try:
            uid = pwd.getpwnam(name).pw_uid
        except KeyError:
            return f"its member {name!r} is no user the user database knows"
        if uid not in trusted:
            return f"user {name!r} (uid {uid}) is in it"
        members += 1
    for pw in pwd.getpwall():
        if pw.pw_gid == gid:
            if pw.pw_uid not in trusted:
                return f"user {pw.pw_name!r} (uid {pw.pw_uid}) has it as primary group"
            members += 1
    if not members:
        return ("no user is listed in it: a group nobody is in is usually one that setgid programs give to "
                "whoever runs them")
    return None


GSHADOW = "/etc/gshadow"


def _gshadow(names: set[str]) -> list[tuple[str, str, list[str], list[str]]]:
    """The /etc/gshadow entries (name, password, administrators, members) of the groups ``names``;
    [] where the file cannot be read (absent, or this uid may not read it)."""
    try:
        with open(GSHADOW, encoding="utf-8", errors="replace") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        fields = line.split(":")
        if len(fields) >= 4 and fields[0] in names:
            out.append((fields[0], fields[1], [u for u in fields[2].split(",") if u],
                        [u for u in fields[3].split(",") if u]))
    return out


def _group(gid: int) -> str:
    try:
        return f"group {grp.getgrgid(gid).gr_name!r} (gid {gid})"
    except KeyError:
        return f"gid {gid}"


def _user(uid: int) -> str:
    try:
        return f"user {pwd.getpwuid(uid).pw_name!r} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def _perms(perm: int) -> str:
    return "".join(c if perm & bit else "-" for c, bit in (("r", 4), ("w", 2), ("x", 1)))


def other_writer(path: str, st: os.stat_result, euid: int | None = None,
                 verdicts: dict[int, str | None] | None = None) -> Writer | None:
    """Who, other than the owner, ``euid`` (default: this process's) and root, may write
    ``path`` (whose ``os.stat`` is ``st``) through its owning group or a named entry of its access
    ACL; None when nobody may, or off POSIX. Only a mode with group write is looked at further
    (the ACL mask): the group database then, and the ACL. Raises OSError (naming ``path``) when
    its ACL cannot be read or parsed: an unreadable ACL is not taken for none. ``verdicts``, kept
    by a caller across the directories of one path, saves reading the user database again for a
    group already judged."""
    mode = stat.S_IMODE(st.st_mode)
    if os.name != "posix" or not mode & stat.S_IWGRP:
        return None
    if euid is None:
        euid = os.geteuid()
    if verdicts is None:
        verdicts = {}

    def outsider_of(gid: int) -> str | None:
        if gid not in verdicts:
            verdicts[gid] = outsider(gid, euid)
        return verdicts[gid]

    try:
        acl = read_acl(path)
    except (OSError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else str(exc)
        raise OSError(getattr(exc, "errno", None) or errno.EINVAL, (
            f"cannot tell who may write {path!r}: its access ACL cannot be read ({why}); remove it with "
            f"`setfacl -b {path}` or make the path's group non-writable with `chmod g-w {path}`")) from exc
    if acl is None:
        why = outsider_of(st.st_gid)
        if why is None:
            return None
        return Writer(f"its {_group(st.st_gid)} may write it, and {why}", f"chmod g-w {path}")
    mask = next((e.perm for e in acl if e.tag == MASK), 0o7)
    for e in acl:
        if not e.perm & mask & _WRITE:
            continue
        if e.tag == USER and e.id is not None and e.id not in (0, euid):
            return Writer(f"its ACL entry user:{e.id}:{_perms(e.perm & mask)} lets {_user(e.id)} write it",
                          f"setfacl -x u:{e.id} {path}")
        if e.tag == GROUP_OBJ and (why := outsider_of(st.st_gid)) is not None:
            return Writer(f"its {_group(st.st_gid)} may write it through its ACL, and {why}", f"chmod g-w {path}")
        if e.tag == GROUP and e.id is not None and (why := outsider_of(e.id)) is not None:
            return Writer(f"its ACL entry group:{e.id}:{_perms(e.perm & mask)} lets {_group(e.id)} write it, and {why}",
                          f"setfacl -x g:{e.id} {path}")
    return None


def file_writer(path: str | os.PathLike[str], st: os.stat_result) -> Writer | None:
    """Who, other than this process's effective uid and root, may write the file ``path`` (whose
    ``os.stat`` is ``st``): every user when it is world-writable (``who`` then names only a group
    or ACL entry that lets others write it too, else is empty; ``fix`` is ``chmod go-w``), else
    its owning group or a named entry of its access ACL when someone else may be in them
    (:func:`other_writer`); None when nobody may, or off POSIX. A group-writable file in a
    user-private group passes, as its directory does. Raises OSError (naming ``path``) when its
    ACL cannot be read or parsed (not for a world-writable file, refused whatever its ACL)."""
    if os.name != "posix":
        return None
    if st.st_mode & stat.S_IWOTH:
        return Writer(writer_note(path, st).removeprefix(": "), f"chmod go-w {os.fspath(path)}")
    return other_writer(os.fspath(path), st)


def writer_note(path: str | os.PathLike[str], st: os.stat_result) -> str:
    """``": WHO"`` naming a group or ACL entry that lets others write the file ``path``, for a
    message that refuses it for its mode anyway; ``""`` when there is none or it cannot be told."""
    try:
        writer = other_writer(os.fspath(path), st)
    except OSError:
        return ""
    return f": {writer.who}" if writer is not None else ""
