"""Pluggable parts: settings.BACKENDS built from the documented variables, and core.backends building them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from config.env import backend_choice
from core.backends import backend_build

ROOT = Path(__file__).resolve().parents[2]
CLASSES = {"extractive": "a.Extractive", "model": "a.Model"}


def choice(kind: str, url: str = "http://llm.example/v1") -> dict:
    return backend_choice("KEEPER_COMPACTOR", kind, CLASSES, url=url, model="small-model", api_key="k")


def test_a_choice_names_its_class_and_a_model_gets_its_endpoint():
    assert choice("extractive") == {"BACKEND": "a.Extractive", "OPTIONS": {}}
    assert choice("model") == {
        "BACKEND": "a.Model",
        "OPTIONS": {"base_url": "http://llm.example/v1", "model": "small-model", "api_key": "k"},
    }


def test_an_unknown_choice_or_a_model_without_a_url_is_a_configuration_error():
    with pytest.raises(
        ImproperlyConfigured, match="unknown KEEPER_COMPACTOR 'abstractive' \\(use extractive or model\\)"
    ):
        choice("abstractive")
    with pytest.raises(ImproperlyConfigured, match="KEEPER_COMPACTOR=model needs KEEPER_COMPACTOR_URL"):
        choice("model", url="")


def test_the_defaults_are_the_deterministic_parts(settings):
    assert {part: spec["BACKEND"].rsplit(".", 1)[1] for part, spec in settings.BACKENDS.items()} == {
        "embedder": "HashingEmbedder",
        "decider": "RuleDecider",
        "compactor": "ExtractiveCompactor",
        "extractor": "RuleExtractor",
        "responder": "RuleResponder",
        "support_model": "RuleSupportAgent",
        "artifact_store": "LocalArtifactStore",
    }


def test_the_artifact_store_is_chosen_by_one_setting_and_s3_needs_a_bucket():
    from config.env import artifact_store_choice

    def choice(kind: str, bucket: str = "") -> dict:
        return artifact_store_choice(kind, root="/r", bucket=bucket, endpoint_url="", region="", timeout=3.0)

    assert choice("local") == {
        "BACKEND": "core.artifacts.local.LocalArtifactStore",
        "OPTIONS": {"root": "/r"},
    }
    assert choice("s3", bucket="b")["OPTIONS"] == {
        "bucket": "b",
        "endpoint_url": "",
        "region": "",
        "timeout": 3.0,
    }
    with pytest.raises(
        ImproperlyConfigured, match="KEEPER_ARTIFACT_STORE=s3 needs KEEPER_ARTIFACT_S3_BUCKET"
    ):
        choice("s3")
    with pytest.raises(ImproperlyConfigured, match="unknown KEEPER_ARTIFACT_STORE 'gcs'"):
        choice("gcs")


def test_a_part_is_built_from_its_dotted_path_and_options(settings):
    settings.BACKENDS = {
        "decider": {"BACKEND": "runs.workflows.refund.deciders.RuleDecider", "OPTIONS": {"window_days": 7}}
    }
    assert backend_build("decider").window_days == 7
    with pytest.raises(ImproperlyConfigured, match="no 'summariser'"):
        backend_build("summariser")
    settings.BACKENDS = {"decider": {"BACKEND": "runs.workflows.refund.deciders.NoSuchDecider"}}
    with pytest.raises(ImproperlyConfigured, match="NoSuchDecider"):
        backend_build("decider")


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"KEEPER_DECIDER": "oracle"}, "unknown KEEPER_DECIDER 'oracle'"),
        ({"KEEPER_EXTRACTOR": "model"}, "KEEPER_EXTRACTOR=model needs KEEPER_EXTRACTOR_URL"),
    ],
)
def test_a_process_with_a_wrong_choice_stops_at_settings(env, message):
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("KEEPER_", "DJANGO_"))}
    done = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=ROOT,
        env={
            **clean,
            "DJANGO_SETTINGS_MODULE": "config.settings.local",
            "DATABASE_URL": "postgresql://app@db.example/kdb",
            "REDIS_URL": "redis://cache.example:6379/0",
            **env,
        },
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0 and "ImproperlyConfigured" in done.stderr and message in done.stderr
