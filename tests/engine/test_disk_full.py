"""A full disk named as the folder of the app it filled, from Spark's own report of it."""

from millrace.config.workspace import Workspace
from millrace.engine.disk_full import disk_full_error

# The end of the StreamingQueryException `millrace run` got when the disk holding an app's
# checkpoint filled (a 16 KB tmpfs mounted on it), before its plan.
SPARK_REPORT = (
    "[STREAM_FAILED] Query [id = f1d44947-9f1f-4d56-9108-b9dc6d77fe23, runId = "
    "c05bf2de-5245-4ef9-8c1c-38653bc7ed85] terminated with exception: java.io.IOException: "
    "No space left on device SQLSTATE: XXKST\n=== Streaming Query ===\n"
    "Identifier: fulldisk.insert.out1\nLogical Plan:\nWriteToMicroBatchDataSource KafkaTable\n"
)


def test_spark_reporting_no_space_left_is_a_full_disk_with_what_to_do(
    fresh_workspace: Workspace,
) -> None:
    (fresh_workspace.checkpoints_dir / "fulldisk").mkdir()

    error = disk_full_error(RuntimeError(SPARK_REPORT), fresh_workspace, "fulldisk")

    assert error is not None and error.code == "disk-full"
    # Every folder is on one disk here: the checkpoint, the most specific, is named.
    assert f"checkpoint folder {fresh_workspace.checkpoints_dir / 'fulldisk'} is full" in (
        error.message
    )
    assert "Logical Plan" not in error.render()
    assert "free space on that disk" in (error.hint or "")
    assert "nothing is lost" in (error.hint or "")


def test_other_failures_are_not_a_full_disk(fresh_workspace: Workspace) -> None:
    failure = RuntimeError(SPARK_REPORT.replace("No space left on device", "Connection reset"))

    assert disk_full_error(failure, fresh_workspace, "fulldisk") is None
