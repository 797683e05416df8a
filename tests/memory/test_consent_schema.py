"""Memory item schema versions: a registry of value migrations per namespace, applied on read."""

from __future__ import annotations

import pytest

from memory.filememory import memory_md_render
from memory.item_schema import (
    UnsupportedItemSchema,
    item_migration_register,
    item_migration_unregister,
    item_schema_current,
    item_value_migrate,
)
from memory.models import MemoryItem
from memory.selectors import memory_recall
from memory.services import memory_remember
from tests.memory.test_memory import said

pytestmark = pytest.mark.django_db


def _v1_to_v2(value):
    return {"street": value, "country": None}  # an address was a string, is now an object


def _v2_to_v3(value):
    return {**value, "country": value["country"] or "PT"}


@pytest.fixture
def address_schema():
    item_migration_register(namespace="address", from_version=1, migrate=_v1_to_v2)
    yield
    item_migration_unregister(namespace="address")


def test_old_items_are_read_in_the_current_version_and_unknown_versions_are_not_read(tenant, address_schema):
    old = memory_remember(
        tenant=tenant,
        subject_id="c-1",
        namespace="address",
        key="home",
        value="Rua 1",
        provenance=said(),
        schema_version=1,
    )
    new = memory_remember(
        tenant=tenant,
        subject_id="c-1",
        namespace="address",
        key="work",
        value={"street": "Rua 2", "country": "PT"},
        provenance=said(),
    )
    assert new.schema_version == 2 == item_schema_current("address")
    items = {m.key: m for m in memory_recall(tenant=tenant, subject_id="c-1")}
    assert items["home"].value == {"street": "Rua 1", "country": None} and items["home"].schema_version == 2
    assert MemoryItem.objects.get(pk=old.pk).value == "Rua 1"  # the stored item is untouched
    assert '- address/home: {"country": null, "street": "Rua 1"}' in memory_md_render(
        tenant=tenant, subject_id="c-1"
    )
    item_migration_register(namespace="address", from_version=2, migrate=_v2_to_v3)
    assert {m.key: m.value["country"] for m in memory_recall(tenant=tenant, subject_id="c-1")} == {
        "home": "PT",
        "work": "PT",
    }
    MemoryItem.objects.filter(pk=new.pk).update(schema_version=9)  # written by newer code
    assert [m.key for m in memory_recall(tenant=tenant, subject_id="c-1")] == ["home"]
    with pytest.raises(UnsupportedItemSchema):
        item_value_migrate(namespace="address", value={}, version=9)


def test_a_migration_registry_has_no_gaps():
    with pytest.raises(ValueError):
        item_migration_register(namespace="gappy", from_version=2, migrate=_v2_to_v3)
    assert item_schema_current("gappy") == 1
