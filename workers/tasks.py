"""Thin Celery tasks: each takes ids and calls one service."""

from __future__ import annotations

from uuid import UUID

from celery import shared_task
from django.conf import settings

from core.artifacts.reclaim import artifacts_reclaim
from core.models import Tenant
from core.tenancy import tenant_get
from erasure.services import erasure_execute
from memory.projection import memory_project, memory_vector_index_ensure
from memory.services import memory_purge_expired
from retrieval.indexes import chunk_index_ensure, chunk_index_wanted
from retrieval.services import document_embed, documents_pending, index_expire, index_reembed
from runs.conversations.learning import run_learn
from runs.conversations.memory_sources import memory_sources_sweep
from runs.conversations.procedures import procedure_sources_sweep, run_completed_learn, run_procedures_learn
from runs.engine.dispatch import runs_code_back, runs_redispatch
from runs.engine.forks import forks_expire
from runs.engine.schedules import schedules_fire
from runs.engine.steps import run_advance
from runs.engine.workspace import workspace_reclaim
from runs.kernel.models import RunStatus
from runs.operator.partitions import partitions_maintain
from runs.operator.retention import forks_purge
from runs.webhooks.delivery import webhooks_deliver_due


@shared_task(name="workers.tasks.advance_run", ignore_result=True)
def advance_run(run_id: str) -> None:
    advanced = run_advance(run_id=UUID(run_id), sliced=True)
    if advanced.status == RunStatus.COMPLETED:  # what it did may be how such requests are done
        run_completed_learn(run_id=UUID(run_id), tenant_id=advanced.tenant_id, answered=advanced.answered)


@shared_task(name="workers.tasks.learn_procedures", ignore_result=True)
def learn_procedures(run_id: str) -> None:
    run_procedures_learn(run_id=UUID(run_id))


@shared_task(name="workers.tasks.redispatch_runs", ignore_result=True)
def redispatch_runs() -> int:
    return runs_redispatch()


@shared_task(name="workers.tasks.resume_runs_whose_code_is_back", ignore_result=True)
def resume_runs_whose_code_is_back() -> int:
    return runs_code_back()


@shared_task(name="workers.tasks.fire_schedules", ignore_result=True)
def fire_schedules() -> int:
    return schedules_fire()


@shared_task(name="workers.tasks.expire_forks", ignore_result=True)
def expire_forks() -> int:
    return forks_expire()


@shared_task(name="workers.tasks.purge_abandoned_forks", ignore_result=True)
def purge_abandoned_forks() -> int:
    return forks_purge().runs


@shared_task(name="workers.tasks.maintain_partitions", ignore_result=True)
def maintain_partitions() -> int:
    return len(partitions_maintain().dropped)


@shared_task(name="workers.tasks.deliver_webhooks", ignore_result=True)
def deliver_webhooks() -> int:
    return webhooks_deliver_due()


@shared_task(name="workers.tasks.reclaim_workspaces", ignore_result=True)
def reclaim_workspaces() -> int:
    return sum(workspace_reclaim().values())  # a count, so an idle sweep logs at DEBUG


@shared_task(name="workers.tasks.reclaim_artifacts", ignore_result=True)
def reclaim_artifacts() -> int:
    return artifacts_reclaim()["deleted"]  # a count, so an idle sweep logs at DEBUG


@shared_task(name="workers.tasks.execute_erasure", ignore_result=True)
def execute_erasure(request_id: str, tenant_id: str) -> None:
    erasure_execute(tenant_id=UUID(tenant_id), request_id=UUID(request_id))


@shared_task(name="workers.tasks.purge_expired_memory", ignore_result=True)
def purge_expired_memory() -> int:
    return memory_purge_expired()


@shared_task(name="workers.tasks.follow_memory_sources", ignore_result=True)
def follow_memory_sources() -> int:
    return memory_sources_sweep() + procedure_sources_sweep()


@shared_task(name="workers.tasks.project_memory", ignore_result=True)
def project_memory(tenant_id: str) -> None:
    memory_project(tenant=tenant_get(slug_or_id=UUID(tenant_id)))


@shared_task(name="workers.tasks.project_all_memory", ignore_result=True)
def project_all_memory() -> int:
    return sum(memory_project(tenant=t)["embedded"] for t in Tenant.objects.all())


@shared_task(name="workers.tasks.learn_from_run", ignore_result=True)
def learn_from_run(run_id: str) -> None:
    run_learn(run_id=UUID(run_id))


@shared_task(name="workers.tasks.index_tenant_vectors", ignore_result=True)
def index_tenant_vectors(tenant_id: str, dimensions: str) -> None:
    memory_vector_index_ensure(tenant=tenant_get(slug_or_id=UUID(tenant_id)), dimensions=int(dimensions))


@shared_task(name="workers.tasks.embed_document", ignore_result=True)
def embed_document(tenant_id: str, document_pk: str) -> int:
    return document_embed(tenant=tenant_get(slug_or_id=UUID(tenant_id)), document_pk=UUID(document_pk))


@shared_task(name="workers.tasks.embed_pending_documents", ignore_result=True)
def embed_pending_documents() -> int:
    """Re-embeds chunks of another index version (the embedder changed), then embeds the documents
    whose embed task was lost (a flushed broker, a killed worker)."""
    done = 0
    for tenant in Tenant.objects.all():
        done += index_reembed(tenant=tenant, actor="beat")
        done += sum(document_embed(tenant=tenant, document_pk=pk) for pk in documents_pending(tenant=tenant))
    return done


@shared_task(name="workers.tasks.expire_retrieval_index", ignore_result=True)
def expire_retrieval_index() -> int:
    return sum(index_expire(tenant=t) for t in Tenant.objects.all())


@shared_task(name="workers.tasks.index_tenant_chunks", ignore_result=True)
def index_tenant_chunks(tenant_id: str, dimensions: str) -> None:
    # Sent after every document embedded once the tenant outgrew exact scans, so by the time it runs
    # the graph may be built, or the chunks gone (a tenant emptied, a benchmark's cleaned up): an
    # empty graph built then would make every later chunk an insert into it, one at a time.
    tenant = tenant_get(slug_or_id=UUID(tenant_id))
    if chunk_index_wanted(tenant, int(dimensions)):
        chunk_index_ensure(tenant=tenant, dimensions=int(dimensions))


@shared_task(name="workers.tasks.resume_lost_langgraph_answers", ignore_result=True)
def resume_lost_langgraph_answers() -> int:
    from runs.langgraph.interrupts import answered_redispatch

    return answered_redispatch(grace=settings.KEEPER_REDISPATCH_GRACE)


@shared_task(name="workers.tasks.resume_langgraph_thread", ignore_result=True)
def resume_langgraph_thread(tenant_id: str, run_id: str) -> None:
    # Imported here: only a worker that resumes a LangGraph graph needs the langgraph extra.
    from runs.langgraph.resume import thread_resume

    thread_resume(tenant_id=UUID(tenant_id), run_id=UUID(run_id))
