package dev.millrace.spark

import java.math.{BigDecimal, MathContext, RoundingMode}

import com.fasterxml.jackson.core.{JsonFactory, JsonFactoryBuilder, JsonParser, JsonToken, StreamReadConstraints}
import com.fasterxml.jackson.core.json.JsonReadFeature

import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{CreateArray, ExpectsInputTypes, Expression, ExpressionInfo, GenericInternalRow, Literal, UnaryExpression}
import org.apache.spark.sql.catalyst.expressions.codegen.{CodegenContext, ExprCode}
import org.apache.spark.sql.types.{BinaryType, DataType, DoubleType, StringType, StructField, StructType}
import org.apache.spark.unsafe.types.UTF8String

/**
 * `millrace_key_and_time(value, key, time)`: what a processor's `Input` reads from a Kafka
 * record's value (BINARY) to place the record, its key and its event-time field `time`, as a
 * struct `key STRING, time_text STRING, time_number DOUBLE`; NULL when the value is not one
 * JSON object as Python's `json.loads` reads UTF-8 text. `key` is a literal: a field's name,
 * or an array of names for a key of several fields (a tuple, in Python).
 *
 * The struct's `key` is the canonical text that Python's
 * `millrace.apps.processors.bucket_store.canonical_text` gives the key as `json.loads` decodes
 * it, so that its CRC-32 is the key's bucket on both sides. A field's text is a string's JSON
 * with every character outside ASCII's printable ones escaped, an integral number's digits
 * (`1.0` and `true` are `1`), another number's shortest text that reads back as the same
 * double, as Python's `repr` writes it; a key of several fields is their texts as a JSON list,
 * `["a", 1]`. It is NULL when a key field is missing or holds an array or an object (no key:
 * Python cannot hash those). `time_text` is the time field's string, `time_number` its number;
 * both are NULL when the field is missing or null, and any other JSON value gives a text that
 * is no time.
 *
 * It replaces a Python pass that parsed every value with `json.loads` before the shuffle to
 * find the same three things: the value is read once, with Jackson's UTF-8 parser, and the
 * record never leaves the JVM for it. Where Python's parse would fail, this gives NULL: bytes
 * that are not UTF-8 or are another encoding's, anything after the object, an integer of more
 * than 4,300 digits (`sys.get_int_max_str_digits`).
 */
case class KeyAndTime(child: Expression, key: KeyFields, timeField: String)
  extends UnaryExpression with ExpectsInputTypes {

  override def inputTypes: Seq[DataType] = Seq(BinaryType)

  override def dataType: DataType = KeyAndTime.Schema

  override def nullable: Boolean = true

  override def prettyName: String = KeyAndTime.Name

  @transient private lazy val reader = KeyAndTimeReader(key, timeField)

  override protected def nullSafeEval(input: Any): Any = reader.read(input.asInstanceOf[Array[Byte]])

  override protected def doGenCode(ctx: CodegenContext, ev: ExprCode): ExprCode = {
    val readerTerm = ctx.addReferenceObj("keyAndTime", KeyAndTimeReader(key, timeField))
    nullSafeCodeGen(ctx, ev, bytes =>
      s"""${ev.value} = $readerTerm.read($bytes);
         |${ev.isNull} = ${ev.value} == null;""".stripMargin)
  }

  override protected def withNewChildInternal(newChild: Expression): KeyAndTime =
    copy(child = newChild)
}

object KeyAndTime {

  /** The SQL name the extension registers the function under. */
  val Name = "millrace_key_and_time"

  val Schema: StructType = StructType(Seq(
    StructField("key", StringType),
    StructField("time_text", StringType),
    StructField("time_number", DoubleType)))

  val info = new ExpressionInfo(classOf[KeyAndTime].getName, Name)

  /** The function of `arguments`, (value, key literal, time field literal), as SQL calls it. */
  def build(arguments: Seq[Expression]): Expression = {
    val built = arguments match {
      case Seq(value, key, Literal(time: UTF8String, StringType)) =>
        KeyFields.of(key).map(KeyAndTime(value, _, time.toString))
      case _ => None
    }
    built.getOrElse(throw new IllegalArgumentException(s"$Name takes three arguments: the " +
      "value, the key field's name or an array of names (literals), and the time field's name"))
  }
}

/**
 * The fields a key is read from: one field (`tuple` false), whose value is the key, or a tuple
 * of the `names`' values in their order.
 */
case class KeyFields(names: Seq[String], tuple: Boolean)

object KeyFields {

  /** The key fields an argument names: a string literal, or `array` of them; None for another. */
  def of(argument: Expression): Option[KeyFields] = argument match {
    case Literal(name: UTF8String, StringType) => Some(KeyFields(Seq(name.toString), tuple = false))
    case CreateArray(names, _) if names.nonEmpty && names.forall(isName) =>
      Some(KeyFields(names.map(_.eval().toString), tuple = true))
    case _ => None
  }

  private def isName(expression: Expression): Boolean = expression match {
    case Literal(name: UTF8String, StringType) => name != null
    case _ => false
  }
}

/** The reads of [[KeyAndTime]], made once per task and reused for each of its records. */
case class KeyAndTimeReader(key: KeyFields, timeField: String) {

  private val keyNames = key.names.toArray

  /** The struct of [[KeyAndTime]] for `bytes`; null when they are not one JSON object. */
  def read(bytes: Array[Byte]): InternalRow = {
    if (!ValueParser.plainUtf8(bytes) || !IsUtf8Check.valid(bytes)) return null
    val parser = KeyAndTimeReader.Factory.createParser(bytes, 0, bytes.length)
    try readObject(parser) catch {
      case _: java.io.IOException => null // not JSON: json.loads fails on it too
    } finally parser.close()
  }

  private def readObject(parser: JsonParser): InternalRow = {
    if (parser.nextToken() != JsonToken.START_OBJECT) return null
    // The texts of the key's fields, in the key's order.
    val parts = new Array[String](keyNames.length)
    var timeText: String = null
    var timeNumber: Any = null
    var token = parser.nextToken()
    while (token == JsonToken.FIELD_NAME) {
      val name = parser.currentName()
      val value = parser.nextToken()
      // The last of a field's repeats counts, as in json.loads.
      var part = keyNames.indexOf(name)
      if (part >= 0) {
        val text = KeyAndTimeReader.canonicalText(parser, value)
        while (part >= 0) {
          parts(part) = text
          part = keyNames.indexOf(name, part + 1)
        }
      }
      if (name == timeField) {
        timeText = KeyAndTimeReader.timeText(parser, value)
        timeNumber = if (value.isNumeric) parser.getDoubleValue else null
      }
      if (!KeyAndTimeReader.readValue(parser, value)) return null
      token = parser.nextToken()
    }
    if (token != JsonToken.END_OBJECT || parser.nextToken() != null) return null
    val keyText =
      if (parts.contains(null)) null
      else if (key.tuple) parts.mkString("[", ", ", "]") // json.dumps's separator
      else parts(0)
    new GenericInternalRow(Array[Any](
      if (keyText == null) null else UTF8String.fromString(keyText),
      if (timeText == null) null else UTF8String.fromString(timeText),
      timeNumber))
  }
}

object KeyAndTimeReader {

  // Python's int() refuses more digits than this (sys.get_int_max_str_digits), json.loads too.
  private val MaxIntDigits = 4300

  // json.loads reads NaN and Infinity, and numbers and texts of any length.
  private val Factory: JsonFactory = new JsonFactoryBuilder()
    .enable(JsonReadFeature.ALLOW_NON_NUMERIC_NUMBERS)
    .streamReadConstraints(StreamReadConstraints.builder()
      .maxNumberLength(Int.MaxValue)
      .maxStringLength(Int.MaxValue)
      .build())
    .build()

  private val Hex = "0123456789abcdef"

  /**
   * Read past the value that starts at `token`, nested ones too; false where json.loads would
   * refuse it (an integer too long for Python's int).
   */
  private def readValue(parser: JsonParser, token: JsonToken): Boolean = {
    var depth = 0
    var current = token
    while (true) {
      current match {
        case JsonToken.START_OBJECT | JsonToken.START_ARRAY => depth += 1
        case JsonToken.END_OBJECT | JsonToken.END_ARRAY => depth -= 1
        case JsonToken.VALUE_NUMBER_INT if digits(parser) > MaxIntDigits => return false
        case _ =>
      }
      if (depth == 0) return true
      current = parser.nextToken()
    }
    true
  }

  private def digits(parser: JsonParser): Int =
    parser.getTextLength - (if (parser.getTextCharacters()(parser.getTextOffset) == '-') 1 else 0)

  /** The canonical text of the key `token` starts, as Python writes it; null for no key. */
  private def canonicalText(parser: JsonParser, token: JsonToken): String = token match {
    case JsonToken.VALUE_STRING => pythonAscii(parser.getText)
    case JsonToken.VALUE_NUMBER_INT => parser.getBigIntegerValue.toString // "-0" is 0, as in Python
    case JsonToken.VALUE_NUMBER_FLOAT => floatText(parser.getDoubleValue)
    case JsonToken.VALUE_TRUE => "1"
    case JsonToken.VALUE_FALSE => "0"
    case JsonToken.VALUE_NULL => "null"
    case _ => null
  }

  private def timeText(parser: JsonParser, token: JsonToken): String = token match {
    case JsonToken.VALUE_STRING => parser.getText
    case JsonToken.VALUE_NULL => null
    case _ if token.isNumeric => null
    // true, false, an array or an object: Python refuses them as a time, and so does a cast.
    case _ => ""
  }

  /** A double as Python's `canonical_text` writes it: an integral one as an int, else `repr`. */
  def floatText(number: Double): String = {
    if (number.isNaN) "NaN"
    else if (number.isInfinite) if (number > 0) "Infinity" else "-Infinity"
    else if (number == Math.rint(number)) new BigDecimal(number).toBigInteger.toString
    else pythonRepr(number)
  }

  /**
   * Python's `repr` of a finite double that is not integral: the shortest decimal that reads
   * back as it (the nearest to it of those), in Python's notation.
   */
  private def pythonRepr(number: Double): String = {
    val exact = new BigDecimal(number)
    var precision = 1
    var shortest: BigDecimal = null
    // Seventeen significant digits always read back as the same double.
    while (shortest == null) {
      shortest = readsBack(exact, number, precision)
      precision += 1
    }
    pythonNotation(shortest.stripTrailingZeros)
  }

  private def readsBack(exact: BigDecimal, number: Double, precision: Int): BigDecimal = {
    val nearest = exact.round(new MathContext(precision, RoundingMode.HALF_EVEN))
    if (nearest.doubleValue == number) return nearest
    // Beside a power of two a double's neighbours are not equally far: the decimal on the
    // other side of it may read back where the nearest does not.
    val away = if (nearest.compareTo(exact) < 0) RoundingMode.CEILING else RoundingMode.FLOOR
    val other = exact.round(new MathContext(precision, away))
    if (other.doubleValue == number) other else null
  }

  // Python's float_repr_style "short": exponent notation below 1e-4 and from 1e16 up.
  private def pythonNotation(decimal: BigDecimal): String = {
    val digits = decimal.unscaledValue.abs.toString
    val point = digits.length - decimal.scale // the value is 0.<digits> times 10^point
    val sign = if (decimal.signum < 0) "-" else ""
    if (point <= -4 || point > 16) {
      val exponent = point - 1
      val mantissa = if (digits.length == 1) digits else s"${digits.head}.${digits.tail}"
      f"$sign${mantissa}e${if (exponent < 0) "-" else "+"}${math.abs(exponent)}%02d"
    } else if (point <= 0) s"${sign}0.${"0" * -point}$digits"
    else if (point < digits.length) s"$sign${digits.take(point)}.${digits.drop(point)}"
    else s"$sign$digits${"0" * (point - digits.length)}.0"
  }

  /** Python's `json.encoder.encode_basestring_ascii`: `text` as JSON, in printable ASCII. */
  def pythonAscii(text: String): String = {
    val out = new java.lang.StringBuilder(text.length + 2).append('"')
    var at = 0
    while (at < text.length) {
      text.charAt(at) match {
        case '"' => out.append("\\\"")
        case '\\' => out.append("\\\\")
        case '\n' => out.append("\\n")
        case '\r' => out.append("\\r")
        case '\t' => out.append("\\t")
        case '\b' => out.append("\\b")
        case '\f' => out.append("\\f")
        case c if c < ' ' || c > '~' =>
          out.append("\\u")
            .append(Hex.charAt(c >> 12 & 0xF)).append(Hex.charAt(c >> 8 & 0xF))
            .append(Hex.charAt(c >> 4 & 0xF)).append(Hex.charAt(c & 0xF))
        case c => out.append(c)
      }
      at += 1
    }
    out.append('"').toString
  }
}
