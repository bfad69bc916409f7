"""What the trace and simulation admins share: records the bucket is the source of truth for."""

from django.contrib import admin


class FromTheBucket(admin.ModelAdmin):
    """A ModelAdmin of records ingestion writes from the bucket: nothing is added or edited
    here, deleting goes through `delete_queryset` (the model's own, under its lock), and the
    list reads none of `list_defers` (columns it does not show, a run's file list among them).
    """

    list_defers: tuple[str, ...] = ()

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def get_queryset(self, request):
        queryset = super().get_queryset(request)
        match = request.resolver_match
        changelist = f"{self.opts.app_label}_{self.opts.model_name}_changelist"
        if match is not None and match.url_name == changelist:
            queryset = queryset.defer(*self.list_defers)
        return queryset

    def delete_model(self, request, obj):
        self.delete_queryset(request, self.model.objects.filter(pk=obj.pk))
