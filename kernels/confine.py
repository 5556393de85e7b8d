"""Run inside the bubblewrap sandbox, before the kernel: Landlock and seccomp, then exec the kernel.

``python -m kernels.confine CONFIG -- ARGV...`` restricts this process (and so everything it execs
or starts) and replaces itself with ARGV. Both restrictions are inherited across execve and can
never be lifted, whatever the kernel's code does afterwards. Standard library only: the Landlock
and seccomp syscalls are called through ctypes (the PyPI bindings wrap the same calls, and
pyseccomp needs libseccomp, which a bare machine may lack). Refused calls fail with EPERM, so a
cell gets a readable error. What each allows and refuses: docs/reliability.md (the Landlock and
seccomp rows).
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import platform
import stat
import struct
import sys
from typing import Any

from kernels import confine_caps

# What of the caps holds inside (``files=tmpfs,tasks=pid_max``), for the kernel to report.
CAPS_ENV = "TUIAGENT_KERNEL_CAPS"

# Landlock uapi (include/uapi/linux/landlock.h).
FS_EXECUTE, FS_WRITE_FILE, FS_READ_FILE, FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
FS_REMOVE_DIR, FS_REMOVE_FILE, FS_MAKE_CHAR, FS_MAKE_DIR = 1 << 4, 1 << 5, 1 << 6, 1 << 7
FS_MAKE_REG, FS_MAKE_SOCK, FS_MAKE_FIFO, FS_MAKE_BLOCK = 1 << 8, 1 << 9, 1 << 10, 1 << 11
FS_MAKE_SYM, FS_REFER, FS_TRUNCATE, FS_IOCTL_DEV = 1 << 12, 1 << 13, 1 << 14, 1 << 15
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1
_RULE_PATH_BENEATH = 1
_CREATE_RULESET_VERSION = 1
# The filesystem rights each ABI knows; a right the running kernel does not know is left out.
_FS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 5: (1 << 16) - 1}
_FILE_ONLY = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV
READ = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR
WRITE = (
    READ
    | FS_WRITE_FILE
    | FS_REMOVE_DIR
    | FS_REMOVE_FILE
    | FS_MAKE_DIR
    | FS_MAKE_REG
    | FS_MAKE_SOCK
    | FS_MAKE_SYM
    | FS_REFER
    | FS_TRUNCATE
)
DEVICE = FS_READ_FILE | FS_WRITE_FILE | FS_TRUNCATE
# The kernel's socket directory: it makes its IPC sockets there and nothing else, so no file a cell
# writes escapes the caps of the run's directory and /tmp (kernels.confine_caps).
SOCKETS = READ | FS_MAKE_SOCK | FS_REMOVE_FILE

# Syscall numbers per machine (arch/x86/entry/syscalls/syscall_64.tbl; the generic table for aarch64).
_SYSCALLS: dict[str, dict[str, Any]] = {
    "x86_64": {
        "landlock_create_ruleset": 444,
        "landlock_add_rule": 445,
        "landlock_restrict_self": 446,
        "seccomp": 317,
        "clone": 56,
        "clone3": 435,
        "denied": (
            57,
            58,
            101,
            310,
            311,
            165,
            166,
            155,
            161,
            308,
            272,
            246,
            320,
            175,
            313,
            176,
            321,
            298,
            250,
            248,
            249,
            323,
            425,
            426,
            427,
            163,
            167,
            168,
            169,
            103,
            164,
            227,
            305,
            159,
            304,
            303,
            133,
            259,
            312,
            438,
            179,
            212,
            153,
            135,
            300,
            428,
            429,
            430,
            431,
            432,
            433,
            442,
            172,
            173,
            154,
            134,
        ),
        # fork vfork ptrace process_vm_readv/writev mount umount2 pivot_root chroot setns unshare
        # kexec_load kexec_file_load init_module finit_module delete_module bpf perf_event_open keyctl
        # add_key request_key userfaultfd io_uring_* acct swapon swapoff reboot syslog settimeofday
        # clock_settime clock_adjtime adjtimex open_by_handle_at name_to_handle_at mknod mknodat kcmp
        # pidfd_getfd quotactl lookup_dcookie vhangup personality fanotify_init open_tree move_mount
        # fsopen fsconfig fsmount fspick mount_setattr iopl ioperm modify_ldt uselib
        "audit_arch": 0xC000003E,
        "x32_bit": 0x40000000,
    },
}
_CLONE_THREAD = 0x00010000
_PR_SET_NO_NEW_PRIVS = 38
_SECCOMP_SET_MODE_FILTER = 1
_SECCOMP_RET_ALLOW, _SECCOMP_RET_ERRNO, _SECCOMP_RET_KILL_PROCESS = 0x7FFF0000, 0x00050000, 0x80000000

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


class ConfineError(OSError):
    """A restriction could not be applied: the kernel must not start without it."""


def _syscall(name: str, *args: object) -> int:
    number = _SYSCALLS[platform.machine()][name]
    assert isinstance(number, int)
    result = _libc.syscall(ctypes.c_long(number), *args)
    if result < 0:
        code = ctypes.get_errno()
        raise ConfineError(code, f"{name}: {os.strerror(code)}")
    return int(result)


def landlock_abi() -> int:
    """The Landlock ABI version this kernel offers; 0 when it has none (or this machine is not known here)."""
    if platform.machine() not in _SYSCALLS:
        return 0
    try:
        return _syscall("landlock_create_ruleset", None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    except ConfineError:
        return 0


def seccomp_available() -> bool:
    return platform.machine() in _SYSCALLS


def _fs_rights(abi: int) -> int:
    return _FS_BY_ABI[max(v for v in _FS_BY_ABI if v <= abi)]


def _world_readable_rules(top: str) -> list[tuple[str, int]]:
    """Rules that let ``top``'s world-readable entries be read and nothing else (/etc/shadow stays out):
    a whole directory where everything below it is world-readable, single entries elsewhere."""
    rules: list[tuple[str, int]] = []

    def walk(path: str) -> bool:  # True: all of path is world-readable
        try:
            entries = list(os.scandir(path))
        except OSError:
            return False
        ok_entries, whole = [], True
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=True)
            except OSError:
                continue  # a dangling link: nothing to read
            readable = bool(st.st_mode & stat.S_IROTH)
            if stat.S_ISDIR(st.st_mode):
                readable = readable and bool(st.st_mode & stat.S_IXOTH) and not entry.is_symlink() and walk(entry.path)
            if readable:
                ok_entries.append((entry.path, st.st_mode))
            else:
                whole = False
        if not whole:
            rules.extend((p, READ if stat.S_ISDIR(m) else READ & _FILE_ONLY) for p, m in ok_entries)
        return whole

    if walk(top):
        rules.append((top, READ))
    else:
        rules.append((top, FS_READ_DIR))  # list it; its hidden files still cannot be opened
    return rules


def apply_landlock(
    read: list[str],
    write: list[str],
    devices: list[str],
    world_readable: list[str],
    network: bool,
    sockets: list[str] | None = None,
) -> int:
    """Restrict this process to the given paths (in ``sockets`` only Unix sockets may be made and
    removed); returns the ABI used. ConfineError if Landlock is missing."""
    abi = landlock_abi()
    if abi < 1:
        raise ConfineError(errno.ENOSYS, "Landlock is not available in this Linux kernel")
    fs = _fs_rights(abi)
    net = (NET_BIND_TCP | NET_CONNECT_TCP) if abi >= 4 and not network else 0
    scoped = (SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL) if abi >= 6 else 0
    attr = struct.pack("QQQ", fs, net, scoped)
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    ruleset = _syscall(
        "landlock_create_ruleset", ctypes.c_char_p(attr[:size]), ctypes.c_size_t(size), ctypes.c_uint32(0)
    )
    try:
        rules = [(p, READ) for p in read] + [(p, WRITE) for p in write] + [(p, DEVICE) for p in devices]
        rules += [(p, SOCKETS) for p in sockets or ()]
        for top in world_readable:
            rules += _world_readable_rules(top)
        for path, rights in rules:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue  # absent here: nothing to allow
            try:
                if not stat.S_ISDIR(os.fstat(fd).st_mode):
                    rights &= _FILE_ONLY
                beneath = struct.pack("=Qi", rights & fs, fd)
                _syscall(
                    "landlock_add_rule",
                    ctypes.c_int(ruleset),
                    ctypes.c_int(_RULE_PATH_BENEATH),
                    ctypes.c_char_p(beneath),
                    ctypes.c_uint32(0),
                )
            finally:
                os.close(fd)
        _no_new_privs()
        _syscall("landlock_restrict_self", ctypes.c_int(ruleset), ctypes.c_uint32(0))
    finally:
        os.close(ruleset)
    return abi


def _no_new_privs() -> None:
    if _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise ConfineError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")


def seccomp_program() -> list[tuple[int, int, int, int]]:
    """The classic-BPF filter as (code, jt, jf, k) instructions (``man 2 seccomp``)."""
    table = _SYSCALLS[platform.machine()]
    ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    eperm, enosys = _SECCOMP_RET_ERRNO | errno.EPERM, _SECCOMP_RET_ERRNO | errno.ENOSYS
    prog = [(ld, 0, 0, 4), (jeq, 1, 0, table["audit_arch"]), (ret, 0, 0, _SECCOMP_RET_KILL_PROCESS), (ld, 0, 0, 0)]
    prog += [(jge, 0, 1, table["x32_bit"]), (ret, 0, 0, eperm)]
    for number in table["denied"]:
        prog += [(jeq, 0, 1, number), (ret, 0, 0, eperm)]
    # clone3 passes its flags in memory a filter cannot read: ENOSYS makes glibc fall back to clone.
    prog += [(jeq, 0, 1, table["clone3"]), (ret, 0, 0, enosys)]
    # clone: threads yes (CLONE_THREAD in the low word of the first argument), processes no.
    prog += [(jeq, 0, 3, table["clone"]), (ld, 0, 0, 16), (jset, 1, 0, _CLONE_THREAD), (ret, 0, 0, eperm)]
    prog += [(ret, 0, 0, _SECCOMP_RET_ALLOW)]
    return prog


def apply_seccomp() -> None:
    prog = seccomp_program()
    code = b"".join(struct.pack("=HBBI", *ins) for ins in prog)
    buffer = ctypes.create_string_buffer(code, len(code))
    fprog = struct.pack("HP", len(prog), ctypes.addressof(buffer))  # struct sock_fprog, native alignment
    _no_new_privs()
    _syscall("seccomp", ctypes.c_uint(_SECCOMP_SET_MODE_FILTER), ctypes.c_uint(0), ctypes.c_char_p(fprog))


def main(argv: list[str]) -> None:
    if len(argv) < 3 or argv[1] != "--":
        sys.exit("usage: python -m kernels.confine CONFIG -- ARGV...")
    config = json.loads(argv[0])
    try:
        if (caps := config.get("caps")) is not None:
            held = confine_caps.apply(caps, config["write"][0] if config.get("private_workdir", True) else None)
            os.environ[CAPS_ENV] = ",".join(f"{k}={v}" for k, v in held.items())
        apply_landlock(
            config["read"],
            config["write"],
            config["devices"],
            config["world_readable"],
            config["network"],
            config.get("sockets", []),
        )
        apply_seccomp()
    except OSError as e:  # ConfineError, or a cap that could not be set
        sys.exit(f"tuiagent sandbox: {e.strerror}")
    os.execv(argv[2], argv[2:])


if __name__ == "__main__":
    main(sys.argv[1:])
