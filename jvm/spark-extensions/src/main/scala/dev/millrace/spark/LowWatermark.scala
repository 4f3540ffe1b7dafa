package dev.millrace.spark

import java.util.UUID
import java.util.concurrent.ConcurrentHashMap

import scala.collection.mutable

import org.apache.spark.rdd.RDD
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{Attribute, UnsafeProjection}
import org.apache.spark.sql.catalyst.plans.logical.{EventTimeWatermark, LogicalPlan}
import org.apache.spark.sql.catalyst.util.DateTimeUtils.microsToMillis
import org.apache.spark.sql.execution.{SparkPlan, SparkStrategy}
import org.apache.spark.sql.execution.streaming.operators.stateful.{EventTimeStatsAccum, EventTimeWatermarkExec}
import org.apache.spark.unsafe.types.CalendarInterval
import org.apache.spark.util.AccumulatorV2

/**
 * The low watermark of an input read by one Kafka source: the least, over the input's
 * buckets (its Kafka partitions), of each bucket's largest event time, minus the lateness.
 *
 * Spark's own watermark operator keeps the largest event time of all its rows, so a bucket
 * read ahead of the others would carry the watermark past their records. A watermark whose
 * child has a column marked with [[LowWatermark.BucketsKey]] (the number of buckets, an INT
 * column holding each row's bucket) is planned as a [[LowWatermarkExec]] instead: Spark's
 * operator, whose event-time statistics report the least of the buckets' largest event times,
 * so that Spark's watermark tracking, checkpointing and the stateful operators downstream work
 * as they do for any watermark.
 */
object LowWatermark {

  /** The metadata key (a LONG, the input's bucket count) of the column holding a row's bucket. */
  val BucketsKey = "millrace.buckets"

  // Per watermark operator of a run of a query ([[LowWatermarkExec.run]]), each bucket's
  // largest event time so far (ms), Long.MinValue for a bucket not yet read. Kept on the
  // driver, where Spark merges the tasks' accumulators, across the micro-batches of the run.
  private val progress = new ConcurrentHashMap[(String, UUID), Array[Long]]()

  /**
   * Adds `observed` (bucket -> largest event time of a micro-batch's rows) to the progress of
   * operator `nodeId` in run `run`; the least over its `buckets` buckets once every one has
   * been read.
   */
  private[spark] def advance(
      run: String,
      nodeId: UUID,
      buckets: Int,
      observed: Map[Int, Long]): Option[Long] = {
    val largest = progress.computeIfAbsent((run, nodeId), _ => Array.fill(buckets)(Long.MinValue))
    largest.synchronized {
      for ((bucket, timeMs) <- observed if bucket >= 0 && bucket < buckets) {
        largest(bucket) = math.max(largest(bucket), timeMs)
      }
      val least = largest.min
      if (least == Long.MinValue) None else Some(least)
    }
  }

}

/** Plans a watermark over a bucket-marked child as a [[LowWatermarkExec]] (see [[LowWatermark]]). */
class LowWatermarkStrategy(session: SparkSession) extends SparkStrategy {
  override def apply(plan: LogicalPlan): Seq[SparkPlan] = plan match {
    case EventTimeWatermark(nodeId, eventTime, delay, child) =>
      child.output.find(_.metadata.contains(LowWatermark.BucketsKey)).toSeq.map { bucket =>
        val buckets = bucket.metadata.getLong(LowWatermark.BucketsKey).toInt
        // A streaming query plans its micro-batches on its own thread, whose job group is the
        // query's run id; two queries reading one DataFrame share its watermark node.
        val run = Option(session.sparkContext.getLocalProperty(JobGroupKey)).getOrElse("")
        new LowWatermarkExec(nodeId, eventTime, delay, bucket, buckets, run, planLater(child))
      }
    case _ => Nil
  }

  private val JobGroupKey = "spark.jobGroup.id"
}

/**
 * Spark's watermark operator for an input of `buckets` buckets, `bucket` naming each row's:
 * its tasks observe each bucket's largest event time, and its event-time statistics hold the
 * least over the buckets of their largest so far in run `run` of the query (none until every
 * bucket has been read). A row whose event time or bucket is NULL moves nothing.
 */
class LowWatermarkExec(
    nodeId: UUID,
    eventTime: Attribute,
    delay: CalendarInterval,
    val bucket: Attribute,
    val buckets: Int,
    val run: String,
    child: SparkPlan)
  extends EventTimeWatermarkExec(nodeId, eventTime, delay, child) {

  private val observed = new BucketProgress(run, nodeId, buckets, eventTimeStats)
  sparkContext.register(observed, "millrace low watermark")

  override protected def doExecute(): RDD[InternalRow] = {
    val observed = this.observed
    val columns = eventTime :: bucket :: Nil
    val output = child.output
    child.execute().mapPartitions { rows =>
      new ObservingIterator(rows, UnsafeProjection.create(columns, output), observed)
    }
  }

  override protected def withNewChildInternal(newChild: SparkPlan): LowWatermarkExec =
    new LowWatermarkExec(nodeId, eventTime, delay, bucket, buckets, run, newChild)

  // The tree's generic copy (`makeCopy`) rebuilds a node from its product elements with its
  // widest constructor, so the product names all seven arguments, in the constructor's order.
  override def productArity: Int = 7

  override def productElement(n: Int): Any = n match {
    case 0 => nodeId
    case 1 => eventTime
    case 2 => delay
    case 3 => bucket
    case 4 => buckets
    case 5 => run
    case 6 => child
    case _ => throw new IndexOutOfBoundsException(n.toString)
  }

  override def productPrefix: String = "LowWatermarkExec"

  override def canEqual(other: Any): Boolean = other.isInstanceOf[LowWatermarkExec]

  override def equals(other: Any): Boolean = other match {
    case that: LowWatermarkExec =>
      productIterator.sameElements(that.productIterator)
    case _ => false
  }

  override def hashCode(): Int = productIterator.toSeq.hashCode()
}

// Rows pass through unchanged; each bucket's largest event time goes to `observed` when the
// bucket changes (a Kafka task reads one) and at the end.
private final class ObservingIterator(
    rows: Iterator[InternalRow],
    read: UnsafeProjection,
    observed: BucketProgress)
  extends Iterator[InternalRow] {

  private var bucket = -1
  private var largestMs = Long.MinValue

  override def hasNext: Boolean = {
    val more = rows.hasNext
    if (!more) flush()
    more
  }

  override def next(): InternalRow = {
    val row = rows.next()
    val columns = read(row)
    if (!columns.isNullAt(0) && !columns.isNullAt(1)) {
      val rowBucket = columns.getInt(1)
      if (rowBucket != bucket) {
        flush()
        bucket = rowBucket
      }
      largestMs = math.max(largestMs, microsToMillis(columns.getLong(0)))
    }
    row
  }

  private def flush(): Unit = if (largestMs != Long.MinValue) {
    observed.add((bucket, largestMs))
    largestMs = Long.MinValue
  }
}

/**
 * Each bucket's largest event time in a micro-batch. Merged on the driver, it advances the
 * operator's progress ([[LowWatermark.advance]]) and sets `stats`, the operator's event-time
 * statistics that Spark's watermark tracking reads, to the least over the buckets.
 */
private final class BucketProgress(
    run: String,
    nodeId: UUID,
    buckets: Int,
    @transient private val stats: EventTimeStatsAccum)
  extends AccumulatorV2[(Int, Long), Map[Int, Long]] {

  private val largest = mutable.HashMap.empty[Int, Long]

  override def isZero: Boolean = largest.isEmpty

  override def copy(): BucketProgress = {
    // A copy goes to a task, which has no statistics to set.
    val copied = new BucketProgress(run, nodeId, buckets, null)
    copied.largest ++= largest
    copied
  }

  override def reset(): Unit = largest.clear()

  override def add(observed: (Int, Long)): Unit = {
    val (bucket, timeMs) = observed
    largest.update(bucket, largest.get(bucket).fold(timeMs)(math.max(_, timeMs)))
  }

  override def merge(other: AccumulatorV2[(Int, Long), Map[Int, Long]]): Unit = {
    other.value.foreach(add)
    if (stats != null) {
      LowWatermark.advance(run, nodeId, buckets, other.value).foreach { least =>
        stats.reset()
        stats.add(least)
      }
    }
  }

  override def value: Map[Int, Long] = largest.toMap
}
