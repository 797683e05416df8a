"""The poisoning review queue's URLs (support or compliance; names are used in the "console" namespace)."""

from django.urls import path

from console.views import held_claims

urlpatterns = [
    path("review/held/", held_claims.held_claim_home, name="held_claims_home"),
    path("review/<str:tenant>/held/", held_claims.held_claim_list, name="held_claims"),
    path(
        "review/<str:tenant>/held/<uuid:held_id>/decide/",
        held_claims.held_claim_decide,
        name="held_claim_decide",
    ),
    path("review/<str:tenant>/rollback/", held_claims.held_claim_rollback, name="held_claim_rollback"),
]

from console.views import procedures  # noqa: E402

urlpatterns += [
    path("procedures/", procedures.procedure_home, name="procedures_home"),
    path("procedures/<str:tenant>/", procedures.procedure_page, name="procedures"),
    path(
        "procedures/<str:tenant>/<uuid:procedure_id>/decide/",
        procedures.procedure_decide,
        name="procedure_decide",
    ),
    path(
        "procedures/<str:tenant>/<uuid:procedure_id>/edit/",
        procedures.procedure_change,
        name="procedure_edit",
    ),
]
