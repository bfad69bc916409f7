from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView

admin.site.site_header = "Cascade"
admin.site.site_title = "Cascade"
admin.site.index_title = "Trace registry"

urlpatterns = [
    path("", RedirectView.as_view(url="/admin/", permanent=False)),
    path("admin/", admin.site.urls),
    path("api/", include("traces.urls")),
    path("api-auth/", include("rest_framework.urls")),
]

# Errors that no view answers: JSON under /api/, Django's pages elsewhere.
handler404 = "traces.errors.not_found"
handler500 = "traces.errors.server_error"
