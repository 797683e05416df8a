"""Form parts the console's filter forms share."""

from __future__ import annotations

from typing import Any

from django import forms

from core.models import Tenant
from core.security import visible_text


class TenantFilterForm(forms.Form):
    """A filter form with a `tenant` choice among the user's own tenants ("all of mine" when empty);
    `tenant_ids` maps each slug offered to its id."""

    tenant = forms.ChoiceField(required=False)

    def __init__(self, data: Any, *, tenants: list[Tenant]) -> None:
        super().__init__(data)
        self.tenant_ids = {t.slug: t.tenant_id for t in tenants}
        self.fields["tenant"].choices = [("", "all of mine"), *((t.slug, t.slug) for t in tenants)]  # type: ignore[attr-defined]


class NoteField(forms.CharField):
    """A person's note: required unless said otherwise, and a note of spaces, control or format
    characters only (U+200B) counts as none."""

    def to_python(self, value: Any) -> str:
        return visible_text(super().to_python(value) or "")
