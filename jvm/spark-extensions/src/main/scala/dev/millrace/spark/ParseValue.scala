package dev.millrace.spark

import com.fasterxml.jackson.core.{JsonFactory, JsonParser}

import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{ExpectsInputTypes, Expression, ExpressionInfo, GenericInternalRow, Literal, TimeZoneAwareExpression, UnaryExpression}
import org.apache.spark.sql.catalyst.expressions.codegen.{CodegenContext, ExprCode}
import org.apache.spark.sql.catalyst.json.{CreateJacksonParser, JacksonParser, JSONOptions}
import org.apache.spark.sql.catalyst.util.{FailureSafeParser, PermissiveMode}
import org.apache.spark.sql.types.{ArrayType, BinaryType, BooleanType, DataType, DoubleType, MapType, StringType, StructField, StructType}
import org.apache.spark.unsafe.types.UTF8String

/**
 * `millrace_parse_value(value, fields, time)`: a Kafka record's value (BINARY) parsed as a
 * JSON object with the declared `fields` (a StructType's JSON, a literal) and the event-time
 * field `time` (a literal name), as a struct of the fields, then `_time_text`, `_time_number`
 * and `_corrupt`; NULL when the value is NULL or holds no JSON token.
 *
 * It means what two of Spark's `from_json` (PERMISSIVE) over the value as text meant before
 * it, in one pass over the bytes: the value is parsed with the time field as a DOUBLE, as most
 * producers write it, unless its text gives the time as a JSON string (`"time":"`, spaces
 * allowed around the colon), which would fail that parse with an exception a record; a value
 * that parse does not take whole is parsed with the time field as text. `_time_number` is the time where the
 * numeric parse took the value, `_time_text` its text where the text parse did (a number's
 * digits too), and `_corrupt` whether the text parse found the value not an object fitting the
 * fields; the fields are those of the parse that took the value, with Spark's partial results
 * for a corrupt one.
 *
 * Spark's `from_json` reads text through a `java.io.Reader` made for every record, a tenth of a
 * SQL app's CPU (benchmarks/yahoo.py, profiled with JFR); this reads the bytes with Jackson's
 * UTF-8 parser, as Spark's JSON files are read. A value whose first bytes would make Jackson
 * take another encoding (a NUL among the first four, a byte from 0xEF up first, such as a
 * byte-order mark) is read through Spark's Reader as before, so a value means the same either
 * way; bytes that are not UTF-8 are a dead letter by `millrace_is_utf8` whichever way parsed.
 * Read from bytes, a STRING field given another JSON value (a number, an object) holds that
 * value's own text, as Spark's JSON files give it, where the Reader gave Spark's re-written
 * text (`{"at": 1.50}` rather than `{"at":1.5}`): the same JSON value.
 */
case class ParseValue(
    child: Expression,
    fields: StructType,
    timeField: String,
    timeZoneId: Option[String] = None)
  extends UnaryExpression with ExpectsInputTypes with TimeZoneAwareExpression {

  override def inputTypes: Seq[DataType] = Seq(BinaryType)

  override def dataType: DataType = StructType(
    ValueParser.nullable(fields).fields ++ Seq(
      StructField(ParseValue.TimeText, StringType),
      StructField(ParseValue.TimeNumber, DoubleType),
      StructField(ParseValue.Corrupt, BooleanType)))

  override def nullable: Boolean = true

  override def prettyName: String = ParseValue.Name

  override def withTimeZone(timeZoneId: String): ParseValue = copy(timeZoneId = Some(timeZoneId))

  @transient private lazy val parser = ValueParser(fields, timeField, timeZoneId.get)

  override protected def nullSafeEval(input: Any): Any =
    parser.parse(input.asInstanceOf[Array[Byte]])

  override protected def doGenCode(ctx: CodegenContext, ev: ExprCode): ExprCode = {
    val parserTerm = ctx.addReferenceObj("valueParser", ValueParser(fields, timeField, timeZoneId.get))
    nullSafeCodeGen(ctx, ev, bytes =>
      s"""${ev.value} = $parserTerm.parse($bytes);
         |${ev.isNull} = ${ev.value} == null;""".stripMargin)
  }

  override protected def withNewChildInternal(newChild: Expression): ParseValue =
    copy(child = newChild)
}

object ParseValue {

  /** The SQL name the extension registers the function under. */
  val Name = "millrace_parse_value"

  /** The struct's field holding the time's text, where the text parse took the value. */
  val TimeText = "_millrace_time_text"

  /** The struct's field holding the time as a number, where the numeric parse took the value. */
  val TimeNumber = "_millrace_time_number"

  /** The struct's field saying the value is not a JSON object fitting the fields. */
  val Corrupt = "_millrace_corrupt"

  val info = new ExpressionInfo(classOf[ParseValue].getName, Name)

  /** The function of `arguments`, (value, fields as JSON, time field), as SQL calls it. */
  def build(arguments: Seq[Expression]): Expression = arguments match {
    case Seq(value, Literal(fields: UTF8String, StringType), Literal(time: UTF8String, StringType)) =>
      DataType.fromJson(fields.toString) match {
        case struct: StructType => ParseValue(value, struct, time.toString)
        case other =>
          throw new IllegalArgumentException(s"$Name takes a struct's fields, not ${other.sql}")
      }
    case _ =>
      throw new IllegalArgumentException(
        s"$Name takes three arguments, (value, fields as a JSON literal, time field literal)")
  }
}

/** The parses of [[ParseValue]], made once per task and reused for each of its records. */
case class ValueParser(fields: StructType, timeField: String, timeZoneId: String) {

  private val corruptName = "_millrace_corrupt_record"

  @transient private lazy val numeric = failureSafe(DoubleType)

  @transient private lazy val textual = failureSafe(StringType)

  @transient private lazy val quotedTime =
    s"\"$timeField\"".getBytes(java.nio.charset.StandardCharsets.UTF_8)

  private def timeIndex = fields.length

  private def corruptIndex = fields.length + 1

  /** The struct of [[ParseValue]] for `bytes`; null when they hold no JSON token. */
  def parse(bytes: Array[Byte]): InternalRow = {
    if (!ValueParser.givesText(bytes, quotedTime)) {
      val row = first(numeric.parse(bytes))
      if (row == null) return null
      if (row.isNullAt(corruptIndex)) {
        val time = if (row.isNullAt(timeIndex)) null else row.getDouble(timeIndex)
        return result(row, null, time, corrupt = false)
      }
    }
    val row = first(textual.parse(bytes))
    if (row == null) return null
    val text = if (row.isNullAt(timeIndex)) null else row.getUTF8String(timeIndex)
    result(row, text, null, corrupt = !row.isNullAt(corruptIndex))
  }

  private def result(parsed: InternalRow, text: UTF8String, number: Any, corrupt: Boolean) = {
    val values = new Array[Any](fields.length + 3)
    var at = 0
    while (at < fields.length) {
      values(at) = parsed.get(at, fields(at).dataType)
      at += 1
    }
    values(at) = text
    values(at + 1) = number
    values(at + 2) = corrupt
    new GenericInternalRow(values)
  }

  private def first(rows: Iterator[InternalRow]): InternalRow = if (rows.hasNext) rows.next() else null

  private def failureSafe(timeType: DataType): FailureSafeParser[Array[Byte]] = {
    val options = new JSONOptions(
      Map("mode" -> PermissiveMode.name, "columnNameOfCorruptRecord" -> corruptName),
      timeZoneId,
      corruptName)
    val parsed = ValueParser.nullable(fields).add(StructField(timeField, timeType))
    val jackson = new JacksonParser(parsed, options, allowArrayAsStructs = false)
    new FailureSafeParser[Array[Byte]](
      bytes => jackson.parse(bytes, ValueParser.createParser, UTF8String.fromBytes),
      PermissiveMode,
      parsed.add(StructField(corruptName, StringType)),
      corruptName)
  }
}

object ValueParser {

  /** Jackson's parser of `bytes` as UTF-8, or Spark's Reader where Jackson would take another. */
  def createParser(factory: JsonFactory, bytes: Array[Byte]): JsonParser =
    if (plainUtf8(bytes)) factory.createParser(bytes, 0, bytes.length)
    else CreateJacksonParser.utf8String(factory, UTF8String.fromBytes(bytes))

  /**
   * Whether Jackson's byte parser reads `bytes` as UTF-8: it picks UTF-16 or UTF-32 for a NUL
   * among the first four bytes, and skips a UTF-8 byte-order mark; those bytes are never the
   * start of a JSON object in UTF-8.
   */
  def plainUtf8(bytes: Array[Byte]): Boolean = {
    if (bytes.nonEmpty && (bytes(0) & 0xFF) >= 0xEF) return false
    var at = 0
    while (at < math.min(4, bytes.length)) {
      if (bytes(at) == 0) return false
      at += 1
    }
    true
  }

  /** `fields` with every field nullable, nested ones too, as `from_json` reads them. */
  def nullable(fields: StructType): StructType = StructType(fields.fields.map(field =>
    field.copy(dataType = nullableType(field.dataType), nullable = true)))

  private def nullableType(kind: DataType): DataType = kind match {
    case struct: StructType => nullable(struct)
    case ArrayType(element, _) => ArrayType(nullableType(element), containsNull = true)
    case MapType(key, value, _) => MapType(nullableType(key), nullableType(value), valueContainsNull = true)
    case other => other
  }

  /**
   * Whether `bytes` hold `quotedName` followed by a colon and a JSON string's quote (`"time":"`,
   * spaces allowed between): whether a value gives that field as text. Any JSON text the
   * search finds it in is parsed the same; it only picks which parse is tried first.
   */
  def givesText(bytes: Array[Byte], quotedName: Array[Byte]): Boolean = {
    val last = bytes.length - quotedName.length
    var at = 0
    while (at <= last) {
      if (bytes(at) == '"' && bytes(at + 1) == quotedName(1)) {
        var matched = 2
        while (matched < quotedName.length && bytes(at + matched) == quotedName(matched)) {
          matched += 1
        }
        if (matched == quotedName.length) {
          var next = skipSpaces(bytes, at + matched)
          if (next < bytes.length && bytes(next) == ':') {
            next = skipSpaces(bytes, next + 1)
            if (next < bytes.length && bytes(next) == '"') return true
          }
        }
      }
      at += 1
    }
    false
  }

  private def skipSpaces(bytes: Array[Byte], from: Int): Int = {
    var at = from
    while (at < bytes.length && (bytes(at) == ' ' || bytes(at) == '\t' || bytes(at) == '\n' ||
        bytes(at) == '\r')) at += 1
    at
  }
}
