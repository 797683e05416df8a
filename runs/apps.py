from importlib import import_module

from django.apps import AppConfig
from django.conf import settings


class RunsConfig(AppConfig):
    name = "runs"
    verbose_name = "Runs"

    def ready(self) -> None:
        from django.db.models.signals import post_migrate

        from runs.kernel.functions import functions_install_after_migrate
        from runs.operator.partitions import partitions_make_after_migrate

        post_migrate.connect(functions_install_after_migrate, sender=self)
        post_migrate.connect(partitions_make_after_migrate, sender=self)  # after the functions it calls
        # Every process (web, worker, beat, tests) registers the same workflows.
        import_module("runs.workflows.demo")
        import_module("runs.workflows.refund.workflow")
        import_module("runs.workflows.conversation")
        import_module("runs.workflows.support_agent")
        import_module("runs.workflows.credit")
        from core.metrics import status_labels_register
        from runs.conversations.messages import conversation_copy
        from runs.engine.forks import fork_copier_register
        from runs.engine.registry import registry
        from runs.kernel.models import OperationStatus, RunStatus
        from runs.langgraph.graphs import graph_register
        from runs.langgraph.store import WORKFLOW as LANGGRAPH

        fork_copier_register(conversation_copy)
        from runs.engine.replays import replay_after_suspend_register
        from runs.evaluation.services import replay_feed

        replay_after_suspend_register(replay_feed)
        from runs.conversations.compaction.tokens import token_counter
        from runs.engine.charges import charges_tokenizer_register

        charges_tokenizer_register(token_counter)
        from runs.engine import artifact_references, workspace

        artifact_references.register()
        workspace.register()
        # Imported only when a worker resumes it (the langgraph extra).
        graph_register(name="support_example", builder="runs.langgraph.example:support_graph")
        registry.register_outside(
            LANGGRAPH,
            how="its graph's process continues it; answer its interrupt in the support inbox, or fork a "
            "checkpoint on its LangGraph page",
        )
        status_labels_register(runs=tuple(RunStatus.values), operations=tuple(OperationStatus.values))
        from runs.external.workflows import external_workflows_ready

        external_workflows_ready()
        for module in settings.KEEPER_WORKFLOW_MODULES:
            import_module(module)
