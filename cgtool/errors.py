"""One error hierarchy for the whole tool. The CLI catches these and maps them to exit codes; the
only other place is a child process (``cgtool.capture.child``), which hands them to its parent as
JSON.

Every error carries the exit code of the README's scheme and a message that names what failed,
the value, and the fix, written as one readable paragraph.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """Exit codes shared by every command (``cgtool.cli._guard`` is the one place that exits)."""

    OK = 0  # success
    CHECK_FAILED = 1  # a check failed: regression, fake dependencies over the limit, diff found
    USAGE = 2  # bad arguments, missing file or function, existing output without --force
    CAPTURE_FAILED = 3  # the workload could not be captured / replayed, or the capture extra is missing
    INVALID_INPUT = 4  # an input file is malformed, truncated, or inconsistent
    INTERNAL = 70  # a bug in cgtool (BSD's EX_SOFTWARE); CGTOOL_DEBUG=1 shows the traceback
    INTERRUPTED = 130  # Ctrl-C (SIGINT): 128 + 2, as a shell reports a program the signal stopped
    PIPE_CLOSED = 141  # the reader of cgtool's output went away (`| head`): 128 + SIGPIPE (13)
    TERMINATED = 143  # SIGTERM (`kill`, `timeout`, a CI runner cancelling the job): 128 + 15


class CgtoolError(Exception):
    """Base class: a message for the user and an exit code."""

    exit_code: ExitCode = ExitCode.USAGE

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class UsageError(CgtoolError):
    """The command line or the environment asks for something that cannot be done."""

    exit_code = ExitCode.USAGE


class OutputExistsError(UsageError):
    """An output path exists and ``--force`` was not given."""

    def __init__(self, path: object) -> None:
        super().__init__(
            f"File already exists, will not overwrite without --force: {path}"
        )


class MissingExtraError(CgtoolError):
    """An optional dependency is missing; the message names the extra to install."""

    exit_code = ExitCode.CAPTURE_FAILED

    def __init__(self, what: str, extra: str = "gpu", detail: str = "") -> None:
        msg = (
            f"{what} needs packages that are not installed{': ' + detail if detail else ''}. "
            f"Install the capture side with `pip install 'cgtool[{extra}]'` "
            "(it keeps an existing torch build; it only adds what is missing)."
        )
        super().__init__(msg)


class CaptureError(CgtoolError):
    """The workload could not be captured, instantiated or replayed."""

    exit_code = ExitCode.CAPTURE_FAILED


class InvalidInputError(CgtoolError):
    """An input artifact is malformed or does not match what it is used with."""

    exit_code = ExitCode.INVALID_INPUT


class CheckFailed(CgtoolError):
    """A CI check (regression, fake dependencies, diff) failed; the report was already printed."""

    exit_code = ExitCode.CHECK_FAILED


# Errors of the capture engine (cgtool.capture.graph), which stands in for torch.cuda.CUDAGraph.
# Each is a cgtool error (with its exit code) AND the built-in exception PyTorch raises in the
# same situation, so code written against torch (``except RuntimeError``) keeps working.


class GraphUsageError(UsageError, RuntimeError):
    """A CUDAGraph method called in a state where PyTorch raises RuntimeError (exit code 2)."""


class GraphCaptureError(CaptureError, RuntimeError):
    """Capture, instantiation or replay failed where PyTorch raises RuntimeError (exit code 3)."""


class GraphTypeError(UsageError, TypeError):
    """A CUDAGraph argument of a type PyTorch refuses with TypeError (exit code 2)."""


class Terminated(BaseException):
    """SIGTERM arrived. Raised in the main thread by the CLI's handler, as Python raises
    KeyboardInterrupt for SIGINT, so that ``finally`` blocks run (temporary files are removed, children
    are stopped) before cgtool exits 143. A BaseException, like KeyboardInterrupt: ``except Exception``
    does not swallow it."""

    def __init__(self, signum: int = 15) -> None:
        super().__init__(signum)
        self.signum = signum


class InputWarning(UserWarning):
    """An input was read, but part of it was dropped or looks wrong; the message says what. The
    CLI prints it as ``cgtool: warning: ...`` on stderr and goes on."""
