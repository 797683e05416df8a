from django.urls import path

from memory import api

urlpatterns = [
    path("memory/items/", api.MemoryItemsApi.as_view(), name="api-memory-items"),
    path(
        "memory/items/<uuid:memory_id>/supersede",
        api.MemoryItemSupersedeApi.as_view(),
        name="api-memory-supersede",
    ),
    path(
        "memory/items/<uuid:memory_id>/invalidate",
        api.MemoryItemInvalidateApi.as_view(),
        name="api-memory-invalidate",
    ),
    path("memory/search/", api.MemorySearchApi.as_view(), name="api-memory-search"),
    path("memory/write", api.MemoryWriteApi.as_view(), name="api-memory-write"),
    # A subject's id may hold "/" (sent as %2F, which the server decodes): `path` takes it whole.
    path("memory/subjects/<path:subject>/memory.md", api.MemoryFileApi.as_view(), name="api-memory-file"),
    path(
        "memory/pending/<uuid:pending_id>/confirm",
        api.MemoryPendingConfirmApi.as_view(),
        name="api-memory-pending-confirm",
    ),
]

from memory.procedures import api as procedures_api  # noqa: E402

urlpatterns += [
    path("memory/procedures/", procedures_api.ProceduresApi.as_view(), name="api-memory-procedures"),
    path(
        "memory/procedures/<uuid:procedure_id>/",
        procedures_api.ProcedureApi.as_view(),
        name="api-memory-procedure",
    ),
    path(
        "memory/procedures/<uuid:procedure_id>/confirm",
        procedures_api.ProcedureConfirmApi.as_view(),
        name="api-memory-procedure-confirm",
    ),
    path(
        "memory/procedures/<uuid:procedure_id>/reject",
        procedures_api.ProcedureRejectApi.as_view(),
        name="api-memory-procedure-reject",
    ),
]
