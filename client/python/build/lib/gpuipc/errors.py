"""Exceptions: every libgpuipc failure becomes a :class:`Error`.

``Error.code`` is the negative errno the C library returned; ``Error.message``
the daemon's explanation (``gpuipc_errmsg``), or libgpuipc's text for the
code when the failure was local.  ``str(e)`` includes both.
"""
from __future__ import annotations

import errno as _errno
from typing import Dict, Optional, Type


class Error(Exception):
    """A gpuipcd or libgpuipc failure.

    Attributes:
        code: the negative errno (e.g. ``-errno.ENOENT``).
        message: the daemon's message, or a description of the local failure.
    """

    def __init__(self, code: int, message: str = "", op: Optional[str] = None) -> None:
        self.code = int(code)
        self.message = message
        self.op = op
        super().__init__(code, message)

    @property
    def errno(self) -> int:
        """The positive errno value (``-code``)."""
        return -self.code

    def __str__(self) -> str:
        name = _errno.errorcode.get(-self.code, str(self.code))
        where = f"{self.op}: " if self.op else ""
        return f"{where}{self.message} [{name}]"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code}, {self.message!r})"


class NotFound(Error):
    """No such registration, id or lease (ENOENT)."""


class Exists(Error):
    """The name is already registered (EEXIST)."""


class Timeout(Error):
    """A wait ran out of time (ETIMEDOUT)."""


class PermissionDenied(Error):
    """The daemon refused: this process may not do that (EPERM, EACCES)."""


class LimitReached(Error):
    """A daemon resource limit was reached (ENOBUFS)."""


class Unsupported(Error):
    """The buffer kind is not served: no CUDA driver, or the daemon lacks it (ENOTSUP)."""


class Unreachable(Error):
    """No daemon could be reached, or the connection to it was lost."""


_BY_ERRNO: Dict[int, Type[Error]] = {
    _errno.ENOENT: NotFound,
    _errno.EEXIST: Exists,
    _errno.ETIMEDOUT: Timeout,
    _errno.EPERM: PermissionDenied,
    _errno.EACCES: PermissionDenied,
    _errno.ENOBUFS: LimitReached,
    _errno.ENOTSUP: Unsupported,
    _errno.ECONNREFUSED: Unreachable,
    _errno.ECONNRESET: Unreachable,
    _errno.ENOTCONN: Unreachable,
    _errno.EPIPE: Unreachable,
    _errno.ESHUTDOWN: Unreachable,
}


def error_for(code: int, message: str, op: Optional[str] = None) -> Error:
    """The exception instance for a negative errno."""
    cls = _BY_ERRNO.get(-code, Error)
    return cls(code, message, op)
