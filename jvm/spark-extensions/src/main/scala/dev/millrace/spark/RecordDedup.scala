package dev.millrace.spark

import org.apache.spark.sql.catalyst.plans.logical.{DeduplicateWithinWatermark, Filter, LogicalPlan}
import org.apache.spark.sql.execution.{FilterExec, SparkPlan, SparkStrategy}
import org.apache.spark.sql.execution.streaming.operators.stateful.StreamingDeduplicateWithinWatermarkExec

/**
 * A query's filter over millrace's deduplication of an input's records, planned below it.
 *
 * An exactly-once input drops the records whose id an earlier record had (Spark's
 * `dropDuplicatesWithinWatermark` keyed by [[RecordDedup.Key]]), and Spark plans a query's
 * filter above that: every record was shuffled by its id and remembered in the state store,
 * though the query kept a third of them (benchmarks/yahoo.py, profiled with JFR). A record's
 * id names one record, whose copies carry the same value, so dropping the copies and then
 * filtering keeps what filtering and then dropping the copies keeps: the filter runs first,
 * and only the ids of the records it keeps are shuffled and remembered.
 *
 * Planned after Spark's optimizer, so the filter stays above the input's watermark: the
 * records it leaves out still move the watermark, as before.
 */
object RecordDedup {

  /** The column holding each record's id that millrace deduplicates an input by. */
  val Key = "_millrace_dedup_key"
}

/** Plans a deterministic filter over millrace's record deduplication below it ([[RecordDedup]]). */
class RecordDedupStrategy extends SparkStrategy {
  override def apply(plan: LogicalPlan): Seq[SparkPlan] = plan match {
    case Filter(condition, DeduplicateWithinWatermark(keys, child))
        if child.isStreaming && condition.deterministic &&
          keys.map(_.name) == Seq(RecordDedup.Key) =>
      StreamingDeduplicateWithinWatermarkExec(keys, FilterExec(condition, planLater(child))) :: Nil
    case _ => Nil
  }
}
