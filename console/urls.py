from django.urls import path

from console.urls_compliance import urlpatterns as compliance
from console.urls_engineer import urlpatterns as engineer
from console.urls_review import urlpatterns as review
from console.urls_support import urlpatterns as support
from console.views import auth

app_name = "console"
urlpatterns = [
    path("", auth.home, name="home"),
    path("sign-in/", auth.sign_in, name="sign_in"),
    path("sign-out/", auth.sign_out, name="sign_out"),
    path("audit/", auth.audit_log, name="audit_log"),
    path("audit/export.csv", auth.audit_export, name="audit_export"),
    *support,
    *engineer,
    *compliance,
    *review,
]
