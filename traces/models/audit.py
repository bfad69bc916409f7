"""The audit log: `AuditEntry`, one row for every write and every operator action, and the
fixed set of actions (`AuditAction`). `traces.audit.record` writes them.

A row names who (the user, kept by name too so that it outlives the account, and the first
characters of the token used), what, which trace or simulation, when and from which address;
never a token or a secret. The application only ever adds rows: saving an existing one,
deleting one, and a queryset's `update` or `delete` raise `AuditIsAppendOnly`, and the admin
offers no add, change or delete. Who holds the database itself can still change it: this keeps
the application, and a mistaken operator in the admin, from rewriting what happened.
"""

from django.conf import settings
from django.db import models
from django.utils import timezone


class AuditIsAppendOnly(Exception):
    """An attempt to change or remove an audit entry through the ORM."""


class AuditAction(models.TextChoices):
    """What happened: a fixed set, so that the admin filters by it and a script can rely on it."""

    TOKEN_CREATE = "token_create", "token created"
    TOKEN_CHANGE = "token_change", "token changed"
    TOKEN_REVOKE = "token_revoke", "token revoked"
    UPLOAD = "upload", "upload asked for"
    COMPLETE = "complete", "upload completed"
    DELETE = "delete", "deleted"
    PUSH = "push", "trace pushed"
    REINGEST = "reingest", "re-ingest asked for"
    MARK_FAILED = "mark_failed", "marked failed"
    MARK_SAMPLE = "mark_sample", "marked a sample"
    UNMARK_SAMPLE = "unmark_sample", "unmarked a sample"
    SWEEP_CREATE = "sweep_create", "sweep created"
    SWEEP_CANCEL = "sweep_cancel", "sweep cancelled"


class AuditSource(models.TextChoices):
    """Where the action came from: the API (a token), the admin (a login) or a command line."""

    API = "api", "API"
    ADMIN = "admin", "admin"
    COMMAND = "command", "command line"


class AuditQuerySet(models.QuerySet):
    """`objects`: no `update` (nor `bulk_update`, which goes through it), no `delete`."""

    def update(self, **kwargs):
        raise AuditIsAppendOnly("audit entries are never changed")

    def delete(self):
        raise AuditIsAppendOnly("audit entries are never deleted")


class AuditEntry(models.Model):
    at = models.DateTimeField(default=timezone.now, editable=False, db_index=True)
    action = models.CharField(max_length=16, choices=AuditAction.choices, editable=False)
    source = models.CharField(max_length=8, choices=AuditSource.choices, editable=False)
    # The account, while it exists (SET_NULL: deleting a user keeps the rows), and its name,
    # which stays: for a command line, the login that ran it.
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="audit_entries",
        editable=False,
    )
    username = models.CharField(max_length=150, blank=True, default="", editable=False)
    token_prefix = models.CharField(
        max_length=16,
        blank=True,
        default="",
        editable=False,
        help_text="The first characters of the token used, or of the token created or revoked.",
    )
    # Plain text, not foreign keys: the entry outlives the trace and the simulation it names.
    trace_id = models.CharField(max_length=1024, blank=True, default="", db_index=True, editable=False)
    simulation = models.CharField(max_length=1024, blank=True, default="", editable=False)
    address = models.GenericIPAddressField(null=True, blank=True, editable=False)
    detail = models.JSONField(default=dict, blank=True, editable=False)

    objects = AuditQuerySet.as_manager()

    class Meta:
        verbose_name = "audit entry"
        verbose_name_plural = "audit log"
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["action", "-at"], name="traces_audit_action_at")]

    def __str__(self) -> str:
        what = "/".join(part for part in (self.trace_id, self.simulation) if part)
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.username or '-'} {self.action} {what}".rstrip()

    def save(self, *args, **kwargs):
        if self.pk is not None:  # a row is written once, by record(), with no id of its own yet
            raise AuditIsAppendOnly("audit entries are never changed")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise AuditIsAppendOnly("audit entries are never deleted")
