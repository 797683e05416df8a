"""URLs of the sandbox, served under /sandbox/ by Keeper's own web process (off in production)."""

from __future__ import annotations

from django.urls import path

from sandbox import views

app_name = "sandbox"
urlpatterns = [
    path("orders", views.orders, name="orders"),
    path("orders/<str:order_id>", views.order_detail, name="order-detail"),
    path("refunds", views.refunds, name="refunds"),
    path("faults", views.faults, name="faults"),
]
