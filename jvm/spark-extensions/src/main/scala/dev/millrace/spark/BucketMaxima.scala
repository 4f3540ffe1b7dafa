package dev.millrace.spark

import java.nio.ByteBuffer

import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{Expression, ExpressionInfo}
import org.apache.spark.sql.catalyst.expressions.aggregate.TypedImperativeAggregate
import org.apache.spark.sql.catalyst.trees.BinaryLike
import org.apache.spark.sql.catalyst.util.ArrayBasedMapData
import org.apache.spark.sql.types.{DataType, LongType, MapType, StringType}
import org.apache.spark.unsafe.types.UTF8String

/**
 * `millrace_bucket_maxima(bucket, time_ms)`: the largest `time_ms` (a LONG) of each bucket (an
 * INT), as a map of the bucket's number as text to that time, holding the buckets that had a
 * row with both set. An input's observed metrics report its buckets' progress with it: one
 * array slot per row, where a conditional maximum per bucket tested every row once per bucket.
 *
 * Keyed by text because Spark writes a map of other keys to a query's progress JSON as a list.
 */
case class BucketMaxima(
    bucket: Expression,
    timeMs: Expression,
    mutableAggBufferOffset: Int = 0,
    inputAggBufferOffset: Int = 0)
  extends TypedImperativeAggregate[Array[Long]]
  with BinaryLike[Expression] {

  override def left: Expression = bucket

  override def right: Expression = timeMs

  override def nullable: Boolean = false

  override def dataType: DataType = MapType(StringType, LongType, valueContainsNull = false)

  override def prettyName: String = BucketMaxima.Name

  // Slot b holds bucket b's largest time, Long.MinValue while it has none; the array grows to
  // the largest bucket seen, so a bucket added to the stream while a query runs is reported.
  override def createAggregationBuffer(): Array[Long] = Array.emptyLongArray

  override def update(buffer: Array[Long], input: InternalRow): Array[Long] = {
    val rowBucket = bucket.eval(input)
    val rowTime = timeMs.eval(input)
    if (rowBucket == null || rowTime == null) return buffer
    val slot = rowBucket.asInstanceOf[Int]
    if (slot < 0) return buffer
    val grown = covering(buffer, slot + 1)
    grown(slot) = math.max(grown(slot), rowTime.asInstanceOf[Long])
    grown
  }

  override def merge(buffer: Array[Long], other: Array[Long]): Array[Long] = {
    val merged = covering(buffer, other.length)
    for (slot <- other.indices) merged(slot) = math.max(merged(slot), other(slot))
    merged
  }

  override def eval(buffer: Array[Long]): Any = {
    val read = buffer.indices.filter(buffer(_) != Long.MinValue)
    ArrayBasedMapData(
      read.map(slot => UTF8String.fromString(slot.toString)).toArray[Any],
      read.map(buffer(_)).toArray[Any])
  }

  override def serialize(buffer: Array[Long]): Array[Byte] = {
    val bytes = ByteBuffer.allocate(buffer.length * java.lang.Long.BYTES)
    buffer.foreach(bytes.putLong)
    bytes.array()
  }

  override def deserialize(bytes: Array[Byte]): Array[Long] = {
    val longs = ByteBuffer.wrap(bytes).asLongBuffer()
    val buffer = new Array[Long](longs.remaining())
    longs.get(buffer)
    buffer
  }

  override def withNewMutableAggBufferOffset(offset: Int): BucketMaxima =
    copy(mutableAggBufferOffset = offset)

  override def withNewInputAggBufferOffset(offset: Int): BucketMaxima =
    copy(inputAggBufferOffset = offset)

  override protected def withNewChildrenInternal(
      newLeft: Expression,
      newRight: Expression): BucketMaxima = copy(bucket = newLeft, timeMs = newRight)

  private def covering(buffer: Array[Long], length: Int): Array[Long] =
    if (buffer.length >= length) buffer
    else {
      val grown = java.util.Arrays.copyOf(buffer, length)
      java.util.Arrays.fill(grown, buffer.length, length, Long.MinValue)
      grown
    }
}

object BucketMaxima {

  /** The SQL name the extension registers the function under. */
  val Name = "millrace_bucket_maxima"

  val info = new ExpressionInfo(classOf[BucketMaxima].getName, Name)

  /** The function of `arguments`, (bucket, time_ms), as SQL calls it. */
  def build(arguments: Seq[Expression]): Expression = arguments match {
    case Seq(bucket, timeMs) => BucketMaxima(bucket, timeMs)
    case _ =>
      throw new IllegalArgumentException(
        s"$Name takes two arguments, (bucket, time_ms), not ${arguments.length}")
  }
}
