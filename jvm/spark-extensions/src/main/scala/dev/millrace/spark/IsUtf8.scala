package dev.millrace.spark

import org.apache.spark.sql.catalyst.expressions.{Expression, ExpressionInfo, ExpectsInputTypes, UnaryExpression}
import org.apache.spark.sql.catalyst.expressions.codegen.{CodegenContext, ExprCode}
import org.apache.spark.sql.types.{BinaryType, BooleanType, DataType}
import org.apache.spark.unsafe.Platform
import org.apache.spark.unsafe.types.UTF8String

/**
 * `millrace_is_utf8(bytes)`: whether `bytes` (a BINARY, such as a Kafka record's value) are
 * valid UTF-8, by Spark's own rule (`is_valid_utf8` of the bytes as a STRING); NULL for NULL.
 *
 * Every record of every input is checked. Spark's check walks the text a byte at a time
 * through its accessors (about 100 ns a record of a hundred bytes, benchmarks/record_checks.py);
 * nearly every record is ASCII, which eight bytes at a time prove valid (about 30 ns), so only
 * the others take Spark's walk.
 */
case class IsUtf8(child: Expression) extends UnaryExpression with ExpectsInputTypes {

  override def inputTypes = Seq(BinaryType)

  override def dataType: DataType = BooleanType

  override def prettyName: String = IsUtf8.Name

  override protected def nullSafeEval(input: Any): Any =
    IsUtf8Check.valid(input.asInstanceOf[Array[Byte]])

  override protected def doGenCode(ctx: CodegenContext, ev: ExprCode): ExprCode =
    defineCodeGen(ctx, ev, bytes => s"${IsUtf8Check.getClass.getName.stripSuffix("$")}.valid($bytes)")

  override protected def withNewChildInternal(newChild: Expression): IsUtf8 = copy(child = newChild)
}

object IsUtf8 {

  /** The SQL name the extension registers the function under. */
  val Name = "millrace_is_utf8"

  val info = new ExpressionInfo(classOf[IsUtf8].getName, Name)

  /** The function of `arguments`, (bytes), as SQL calls it. */
  def build(arguments: Seq[Expression]): Expression = arguments match {
    case Seq(bytes) => IsUtf8(bytes)
    case _ =>
      throw new IllegalArgumentException(
        s"$Name takes one argument, (bytes), not ${arguments.length}")
  }
}

/** The check itself, which the generated code calls by its static forwarder. */
object IsUtf8Check {
  private val HighBits = 0x8080808080808080L

  def valid(bytes: Array[Byte]): Boolean = {
    val whole = bytes.length - bytes.length % java.lang.Long.BYTES
    var high = 0L
    var at = 0
    while (at < whole) {
      high |= Platform.getLong(bytes, Platform.BYTE_ARRAY_OFFSET + at)
      at += java.lang.Long.BYTES
    }
    while (at < bytes.length) {
      high |= bytes(at)
      at += 1
    }
    (high & HighBits) == 0 || UTF8String.fromBytes(bytes).isValid
  }
}
