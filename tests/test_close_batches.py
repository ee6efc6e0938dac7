"""A range's ready hours verified by one task: what its failure says (``laketide.close.batches.failures``)."""

from __future__ import annotations

from laketide.close.batches import failures


def test_a_batch_without_failures_passes() -> None:
    assert failures({"verified": [{"partition": "2012-03-05T00:00:00+00:00"}], "failed": []}) is None


def test_failures_name_every_failed_hour_and_retry_only_for_pending_files() -> None:
    result = {"verified": [{"partition": "2012-03-05T00:00:00+00:00"}],
              "failed": [{"partition": "2012-03-05T01:00:00+00:00", "message": "audit 20 != lake 18 + rejects 1",
                          "retryable": False},
                         {"partition": "2012-03-05T02:00:00+00:00", "message": "1 landed file pending",
                          "retryable": True}]}
    message, retryable = failures(result) or ("", False)
    assert message == ("2 of 3 hours failed their verification; none of them closes in this run:\n"
                       "  2012-03-05T01:00:00+00:00: audit 20 != lake 18 + rejects 1\n"
                       "  2012-03-05T02:00:00+00:00: 1 landed file pending")
    assert retryable
    result["failed"] = result["failed"][:1]
    assert (failures(result) or ("", True))[1] is False
