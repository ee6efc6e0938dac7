"""OpenLineage datasets of laketide's tasks, for Airflow's OpenLineage provider.

The provider's listener calls ``get_openlineage_facets_on_start`` / ``get_openlineage_facets_on_complete`` of
laketide's operators (:mod:`laketide.airflow.operators`) when lineage is configured; those methods import this
module, so the provider and the OpenLineage client are imported only then (never when a DAG file is parsed).
Without an OpenLineage transport the provider is disabled and nothing here runs.

Naming (OpenLineage's naming conventions):

* an Iceberg table: namespace the catalog's warehouse (``file:///srv/laketide/warehouse``, ``s3://bucket/wh``),
  name the table's identifier in the catalog (``lake.clicks``); a ``catalog`` facet names the catalog (framework
  ``iceberg``, type ``jdbc``, its name) and a ``storage`` facet the layer (``iceberg``, ``parquet``);
* a landing zone: a local folder, namespace ``file``, name its absolute path (a URI's scheme and host otherwise).

What each task reports: the writer (ingest) reads the landing zone(s) of its stream(s) and writes their events
and rejects tables (an upsert stream also its merged table and tombstones); a redo and a backfill the same for
one stream; a repair reads and writes the events table; maintenance writes the tables it maintains (reads them
only, in a dry run); a close reads the hour of the events table it verified (a ``subset`` facet naming the hour,
``dataQualityMetrics`` and ``dataQualityAssertions`` with the verification's counts, ``version`` the verified
snapshot) and writes the status table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import pairwise
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from airflow.providers.openlineage.extractors import OperatorLineage
from openlineage.client.event_v2 import Dataset, InputDataset, OutputDataset
from openlineage.client.facet_v2 import (
    DatasetFacet,
    InputDatasetFacet,
    base_subset_dataset,
    catalog_dataset,
    data_quality_assertions_dataset,
    data_quality_metrics_input_dataset,
    dataset_version_dataset,
    storage_dataset,
)

from laketide.config import LaketideConfig, StreamConfig, maintained_tables
from laketide.config.upsert import tombstones_table


def warehouse_namespace(warehouse: str) -> str:
    """The OpenLineage namespace of the tables of a warehouse: its URI without a trailing slash (a bare path: a
    ``file://`` URI)."""
    uri = warehouse if "://" in warehouse else f"file://{Path(warehouse).absolute()}"
    return uri.rstrip("/")


def table_facets(config: LaketideConfig) -> dict[str, DatasetFacet]:
    """The catalog and storage facets of every laketide table (the catalog database's URI is left out: it may hold
    a password)."""
    catalog = config.catalog
    kind = "sqlite" if catalog.uri.startswith("sqlite") else "postgresql"
    return {
        "catalog": catalog_dataset.CatalogDatasetFacet(
            framework="iceberg", type="jdbc", name=catalog.name, warehouseUri=catalog.warehouse, source=kind),
        "storage": storage_dataset.StorageDatasetFacet(storageLayer="iceberg", fileFormat="parquet"),
    }


def table(config: LaketideConfig, identifier: str, output: bool = False) -> Dataset:
    """An Iceberg table of the catalog, as an input (default) or output dataset."""
    kind = OutputDataset if output else InputDataset
    return kind(namespace=warehouse_namespace(config.catalog.warehouse), name=identifier, facets=table_facets(config))


def landing_zone(path: Path | str) -> InputDataset:
    """A stream's landing zone: a local folder (``file``, its absolute path) or a URI (its scheme and host)."""
    text = str(path)
    if "://" not in text:
        return InputDataset(namespace="file", name=str(Path(text).absolute()))
    parts = urlparse(text)
    return InputDataset(namespace=f"{parts.scheme}://{parts.netloc}", name=parts.path or "/")


def written_tables(stream: StreamConfig) -> list[str]:
    """The tables a stream's writer (and its redo) writes: events and rejects, and an upsert stream's merged table
    and its tombstones."""
    tables = [stream.table, stream.rejects_table]
    if stream.upsert is not None:
        tables += [stream.upsert.table, tombstones_table(stream.upsert)]
    return tables


def stream_lineage(config: LaketideConfig, streams: Sequence[StreamConfig]) -> OperatorLineage:
    """Landing zones in, the streams' tables out: a writer, a redo, a backfill."""
    return OperatorLineage(
        inputs=[landing_zone(s.landing_path) for s in streams],
        outputs=[table(config, t, output=True) for s in streams for t in written_tables(s)],
    )


def arguments(job_args: Sequence[str]) -> dict[str, str]:
    """``--name value`` pairs of a job's (rendered) arguments."""
    return {key.removeprefix("--"): value for key, value in pairwise(job_args) if key.startswith("--")}


def job_lineage(config: LaketideConfig, job: str, job_args: Sequence[str]) -> OperatorLineage:
    """The datasets of a laketide Spark job (``spark_jobs/<job>``) from its arguments; nothing when they are not
    rendered yet or name nothing configured."""
    if any("{{" in a for a in job_args):
        return OperatorLineage()
    args = arguments(job_args)
    known = {s.name: s for s in config.streams}
    if job == "ingest_stream.py":
        if "group" in args:
            return stream_lineage(config, config.groups().get(args["group"], []))
        return stream_lineage(config, [known[args["stream"]]] if args.get("stream") in known else [])
    if job in ("redo.py", "backfill.py") and args.get("stream") in known:
        return stream_lineage(config, [known[args["stream"]]])
    if job == "repair.py" and args.get("stream") in known:
        events = known[args["stream"]].table
        return OperatorLineage(inputs=[table(config, events)], outputs=[table(config, events, output=True)])
    if job == "maintain.py":
        wanted = args.get("table", "all")
        tables = maintained_tables(config) if wanted == "all" else wanted.split(",")
        dry = args.get("dry-run", "true") != "false"
        return OperatorLineage(inputs=[table(config, t) for t in tables] if dry else [],
                               outputs=[] if dry else [table(config, t, output=True) for t in tables])
    return OperatorLineage()


def close_lineage(config: LaketideConfig, closed: Mapping[str, Any]) -> OperatorLineage:
    """A close (or re-close) from its close record (:meth:`laketide.close.results.ClosedPartition.to_dict`): the
    hour of the events table verified, with the verification's counts, in; the status table out."""
    audit, rows, rejects = int(closed["audit"]), int(closed["rows"]), int(closed["rejects"])
    duplicates = int(closed.get("duplicates_removed") or 0)
    hour = str(closed["partition"])
    stream = config.stream(str(closed["stream"]))
    counts = {"audit": audit, "rows": rows, "rejects": rejects, "duplicates": duplicates}
    checks = data_quality_assertions_dataset
    facets: dict[str, InputDatasetFacet] = {
        "subset": base_subset_dataset.InputSubsetInputDatasetFacet(
            inputCondition=base_subset_dataset.PartitionSubsetCondition(
                partitions=[base_subset_dataset.Partition(dimensions={"hour": hour}, identifier=hour)])),
        "dataQualityMetrics": data_quality_metrics_input_dataset.DataQualityMetricsInputDatasetFacet(
            columnMetrics={}, rowCount=rows),
        "dataQualityAssertions": checks.DataQualityAssertionsDatasetFacet(assertions=[
            checks.Assertion(assertion="audit_equals_lake_plus_rejects", success=True, expected=str(audit),
                             actual=str(rows + rejects + duplicates), params={"hour": hour, **counts}),
            checks.Assertion(assertion="unique_event_ids", success=True, column=stream.event_id_field,
                             params={"hour": hour}),
        ]),
    }
    dataset_facets = table_facets(config)
    if closed.get("snapshot_id"):  # the snapshot verified (none: an empty hour of an empty table)
        dataset_facets["version"] = dataset_version_dataset.DatasetVersionDatasetFacet(
            datasetVersion=str(closed["snapshot_id"]))
    events = InputDataset(namespace=warehouse_namespace(config.catalog.warehouse), name=stream.table,
                          facets=dataset_facets, inputFacets=facets)
    return OperatorLineage(inputs=[events], outputs=[table(config, config.close.status_table, output=True)])
