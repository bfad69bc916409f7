"""What can go wrong, each as one line a person understands and an exit status of its own.

The command prints `cascade: <message>` and exits with the error's `exit_code`; scripts tell
the cases apart by the status (docs/client.md lists them):

    0  done
    1  anything else (a server error, a file that could not be written)
    2  wrong arguments (argparse)
    3  no token: CASCADE_TOKEN is not set
    4  the server refused the token (401)
    5  no such trace or sweep (404)
    6  the server could not be reached
    7  a file changed in the bucket since the listing (size or MD5 differs, or the bucket
       answered 403/404 for its link): run the pull again
    8  the trace is not ready for what was asked (409), or not ready to pull (its state says why)
    9  the run lacks instruction trace files that its kernel list names (`--allow-missing`)
   10  the destination cannot take the pull: a file, a folder of another trace (`--force`), or
       a disk without room for what the listing says
   11  the server's answer is malformed or hostile: not the API's shape, larger than the client
       reads (answers.py states the bounds), a redirect, a file listed past the size a pull
       takes, a path that would leave the folder, an upload answer for a file not asked for
   12  a sweep waited for (`cascade sweep --wait`) ended with a job failed or cancelled, or
       with no job ready (skipped pairs are neither)
"""


class CascadeError(Exception):
    exit_code = 1


class NoToken(CascadeError):
    exit_code = 3


class BadToken(CascadeError):
    exit_code = 4


class NotFound(CascadeError):
    exit_code = 5


class Unreachable(CascadeError):
    exit_code = 6


class FileChanged(CascadeError):
    exit_code = 7


class NotReady(CascadeError):
    exit_code = 8


class MissingTraceFiles(CascadeError):
    exit_code = 9


class DestinationInUse(CascadeError):
    exit_code = 10


class BadAnswer(CascadeError):
    exit_code = 11


class SweepFailed(CascadeError):
    exit_code = 12
