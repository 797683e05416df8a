"""The compliance screens' URLs (names are used in the "console" namespace)."""

from django.urls import path

from console.views import compliance

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
        "compliance/<str:tenant>/erasures/<uuid:request_id>/receipt.json",
        compliance.erasure_receipt,
        name="compliance_erasure_receipt",
    ),
]
