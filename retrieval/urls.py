from django.urls import path

from retrieval import api

# A document's id may hold "/" (sent as %2F, which the server decodes): `path` takes it whole. The
# document's own route ends in "/" and its ACL's does not, so "a/acl" is never both.
urlpatterns = [
    path("retrieval/documents/", api.DocumentsApi.as_view(), name="api-retrieval-documents"),
    path(
        "retrieval/documents/<path:document_id>/",
        api.DocumentDetailApi.as_view(),
        name="api-retrieval-document",
    ),
    path(
        "retrieval/documents/<path:document_id>/acl", api.DocumentAclApi.as_view(), name="api-retrieval-acl"
    ),
    path("retrieval/principals/", api.PrincipalsApi.as_view(), name="api-retrieval-principals"),
    path(
        "retrieval/principals/<str:principal>/",
        api.PrincipalDetailApi.as_view(),
        name="api-retrieval-principal",
    ),
    path("retrieval/search/", api.SearchApi.as_view(), name="api-retrieval-search"),
    path(
        "retrieval/snapshots/<str:snapshot_id>/",
        api.SnapshotDetailApi.as_view(),
        name="api-retrieval-snapshot",
    ),
    path(
        "retrieval/snapshots/<str:snapshot_id>/replay",
        api.SnapshotReplayApi.as_view(),
        name="api-retrieval-replay",
    ),
    path("retrieval/invalidations/", api.InvalidationsApi.as_view(), name="api-retrieval-invalidations"),
]
