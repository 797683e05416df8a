"""The compliance screens' URLs (names are used in the "console" namespace)."""

from django.urls import path

from console.views import compliance, filememory, offboarding

urlpatterns = [
    path("compliance/", compliance.compliance_home, name="compliance_home"),
    path("compliance/<str:tenant>/erase/", compliance.erasure_confirm, name="compliance_erase"),
    path("compliance/<str:tenant>/erasures/", compliance.erasure_list, name="compliance_erasure_list"),
    path(
        "compliance/<str:tenant>/erasures/<uuid:request_id>/",
        compliance.erasure_detail,
        name="compliance_erasure_detail",
    ),
    path(
        "compliance/<str:tenant>/erasures/<uuid:request_id>/retry/",
        compliance.erasure_retry,
        name="compliance_erasure_retry",
    ),
    path(
        "compliance/<str:tenant>/erasures/<uuid:request_id>/receipt.json",
        compliance.erasure_receipt,
        name="compliance_erasure_receipt",
    ),
    path("compliance/<str:tenant>/sources/<uuid:run_id>/", compliance.claim_source, name="compliance_source"),
]

urlpatterns += [
    path("compliance/<str:tenant>/offboarding/", offboarding.offboarding_page, name="compliance_offboarding"),
    path(
        "compliance/<str:tenant>/offboarding/export/",
        offboarding.offboarding_export,
        name="compliance_offboarding_export",
    ),
    path(
        "compliance/<str:tenant>/offboarding/erase/",
        offboarding.offboarding_erase,
        name="compliance_offboarding_erase",
    ),
    path("compliance/offboardings/", offboarding.offboarding_list, name="compliance_offboarding_list"),
    path(
        "compliance/offboardings/<uuid:offboarding_id>/",
        offboarding.offboarding_receipt,
        name="compliance_offboarding_receipt",
    ),
    path(
        "compliance/offboardings/<uuid:offboarding_id>/receipt.json",
        offboarding.offboarding_receipt_json,
        name="compliance_offboarding_receipt_json",
    ),
]

urlpatterns += [
    path("compliance/<str:tenant>/memory-md/", filememory.memory_md_page, name="compliance_memory_md"),
    path(
        "compliance/<str:tenant>/pending/<uuid:pending_id>/confirm/",
        filememory.pending_confirm_view,
        name="compliance_pending_confirm",
    ),
]
