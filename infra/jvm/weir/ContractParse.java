package weir;

import com.fasterxml.jackson.core.JsonEncoding;
import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonGenerator;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.time.ZoneId;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.regex.Pattern;
import org.apache.spark.sql.Column;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF1;
import org.apache.spark.sql.catalyst.util.DateTimeUtils;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;
import scala.Option;

/**
 * A line of a JSON event contract read, typed and judged in one pass of Jackson's streaming
 * parser: what {@code spark_jobs.transforms.parse} once built from {@code from_json} (every field
 * as its text), a strict check of the line, and a dozen Spark expressions per field. Those took
 * about 14 CPU-s of a 507 k-line micro-batch, half of all its work (docs/performance.md).
 *
 * <p>Exactly the old verdicts, reason for reason (tests/unit/test_contract_parse.py runs both over
 * hostile lines):
 *
 * <ul>
 *   <li>a field's text is Spark's {@code from_json} with a string schema: a string's value, JSON
 *       null as absent, the last of duplicate keys, and any other value rendered as Spark renders
 *       it (Jackson's generator: {@code 1.50} is {@code 1.5}, {@code -0} is {@code 0}, {@code
 *       1e400} is {@code "Infinity"});
 *   <li>present means non-null and not only spaces (Spark's {@code trim});
 *   <li>shapes are the same Java patterns {@code rlike} found; the typed values are Spark's own
 *       casts ({@code DateTimeUtils.stringToTimestamp}, {@code UTF8String.toLong}, {@code
 *       Double.parseDouble});
 *   <li>the line itself must be exactly one JSON object under Jackson's strict defaults (no single
 *       quotes, NaN, leading zeros or comments): from_json reads the first value of a line and
 *       ignores what follows, so {@code {...}{...}} would half-pass.
 * </ul>
 *
 * <p>Returns a struct: each contract field typed (string, bigint, double or timestamp), then
 * {@code _line_reason} (why the line is not one JSON object), {@code _reasons_head} and {@code
 * _reasons_tail} (the fields' reasons, "; "-joined, up to and including the event-time field and
 * after it, so that the caller puts the event time's own check between them), and {@code
 * _event_time_text} (the event time's text when it typed, for that check's reason).
 */
public final class ContractParse implements UDF1<String, Row> {
  private static final long serialVersionUID = 1L;
  private static final JsonFactory FACTORY = new JsonFactory();
  private static final Pattern ISO_8601 =
      Pattern.compile(
          "^\\d{4}-\\d{2}-\\d{2}[T ]\\d{2}:\\d{2}(:\\d{2}(\\.\\d{1,9})?)?(Z|[+-]\\d{2}(:?\\d{2})?)$");
  private static final Pattern INTEGER = Pattern.compile("^-?\\d+$");
  private static final Pattern NUMBER = Pattern.compile("^-?(\\d+\\.?\\d*|\\.\\d+)([eE][-+]?\\d+)?$");
  static final String LINE_REASON = "_line_reason";
  static final String REASONS_HEAD = "_reasons_head";
  static final String REASONS_TAIL = "_reasons_tail";
  static final String EVENT_TIME_TEXT = "_event_time_text";

  private final String contract;
  private transient volatile Contract compiled;

  /**
   * {@code contract}: JSON, {@code {"zone": ..., "event_time": ..., "fields": [{"name", "type",
   * "required", "allowed", "minimum", "maximum", "range"}, ...]}}, as {@code transforms} writes it
   * ({@code range} is the bounds as a reason names them, e.g. {@code [0..100000]}).
   */
  public ContractParse(String contract) {
    this.contract = contract;
    this.compiled = Contract.of(contract);
  }

  /** The parse of {@code line} under {@code contract}: a column of the struct described above. */
  public static Column column(String contract, Column line) {
    ContractParse parse = new ContractParse(contract);
    return functions.udf(parse, parse.contract().schema).apply(line);
  }

  private Contract contract() {
    Contract c = compiled;
    if (c == null) {
      c = Contract.of(contract);
      compiled = c; // after deserialization: every thread builds the same
    }
    return c;
  }

  @Override
  public Row call(String line) {
    Contract c = contract();
    Object[] out = new Object[c.fields.length + 4];
    if (line == null) {
      return RowFactory.create(out);
    }
    String[] text = new String[c.fields.length];
    String lineReason = read(line, c, text);
    StringBuilder head = new StringBuilder();
    StringBuilder tail = new StringBuilder();
    for (int i = 0; i < c.fields.length; i++) {
      Field f = c.fields[i];
      StringBuilder reasons = i <= c.eventTime ? head : tail;
      out[i] = f.judge(text[i], reasons, c.zone);
    }
    int n = c.fields.length;
    out[n] = lineReason;
    out[n + 1] = head.length() == 0 ? null : head.toString();
    out[n + 2] = tail.length() == 0 ? null : tail.toString();
    out[n + 3] = c.eventTime >= 0 && out[c.eventTime] != null ? text[c.eventTime] : null;
    return RowFactory.create(out);
  }

  /**
   * Reads the fields' texts of {@code line} into {@code text}; returns why the line is not exactly
   * one JSON object, null when it is. Of a line whose first value does not read, as of a blank one,
   * from_json reads no field: every text stays null.
   */
  private static String read(String line, Contract c, String[] text) {
    try (JsonParser parser = FACTORY.createParser(line)) {
      JsonToken first = parser.nextToken();
      if (first == null) {
        return "malformed JSON"; // blank: the caller names a line of spaces an empty line
      }
      if (first != JsonToken.START_OBJECT) {
        return "malformed JSON: not an object";
      }
      while (parser.nextToken() == JsonToken.FIELD_NAME) {
        Integer index = c.index.get(parser.currentName());
        JsonToken value = parser.nextToken();
        if (index == null) {
          parser.skipChildren();
        } else {
          text[index] = textOf(parser, value);
        }
      }
      JsonToken next;
      try {
        next = parser.nextToken();
      } catch (JsonProcessingException trailing) {
        return "malformed JSON: trailing characters after the object";
      }
      return next == null ? null : "malformed JSON: more than one JSON value on the line";
    } catch (IOException | RuntimeException err) {
      // Jackson's errors (syntax, its limits) and a value the generator cannot write: from_json
      // reads no field of such a line
      Arrays.fill(text, null);
      return "malformed JSON";
    }
  }

  /** A value as from_json reads it into a string column. */
  private static String textOf(JsonParser parser, JsonToken token) throws IOException {
    switch (token) {
      case VALUE_STRING:
        return parser.getText();
      case VALUE_NULL:
        return null;
      case VALUE_TRUE:
        return "true";
      case VALUE_FALSE:
        return "false";
      case VALUE_NUMBER_INT:
        // the generator writes the number's value: the text, but for -0 (strict JSON has no
        // leading zeros or plus sign)
        String digits = parser.getText();
        return digits.equals("-0") ? "0" : digits;
      case VALUE_NUMBER_FLOAT:
        double d = parser.getDoubleValue();
        return Double.isFinite(d) ? Double.toString(d) : "\"" + d + "\"";
      default:
        // an object or an array: rendered by Jackson's generator, as Spark does
        ByteArrayOutputStream bytes = new ByteArrayOutputStream();
        try (JsonGenerator generator = FACTORY.createGenerator(bytes, JsonEncoding.UTF8)) {
          generator.copyCurrentStructure(parser);
        }
        return new String(bytes.toByteArray(), StandardCharsets.UTF_8);
    }
  }

  /** Spark's trim: only spaces. */
  private static boolean present(String s) {
    if (s == null) {
      return false;
    }
    for (int i = 0; i < s.length(); i++) {
      if (s.charAt(i) != ' ') {
        return true;
      }
    }
    return false;
  }

  private static void add(StringBuilder reasons, String reason) {
    if (reasons.length() > 0) {
      reasons.append("; ");
    }
    reasons.append(reason);
  }

  /** A contract compiled: its fields in order, their index by name, the event time's index. */
  private static final class Contract {
    final Field[] fields;
    final Map<String, Integer> index = new HashMap<>();
    final int eventTime;
    final ZoneId zone;
    final StructType schema;

    private Contract(Field[] fields, int eventTime, ZoneId zone) {
      this.fields = fields;
      this.eventTime = eventTime;
      this.zone = zone;
      List<StructField> columns = new ArrayList<>();
      for (int i = 0; i < fields.length; i++) {
        index.put(fields[i].name, i);
        columns.add(DataTypes.createStructField(fields[i].name, fields[i].sqlType(), true));
      }
      for (String extra : new String[] {LINE_REASON, REASONS_HEAD, REASONS_TAIL, EVENT_TIME_TEXT}) {
        if (index.containsKey(extra)) {
          throw new IllegalArgumentException("a contract field may not be named " + extra);
        }
        columns.add(DataTypes.createStructField(extra, DataTypes.StringType, true));
      }
      this.schema = DataTypes.createStructType(columns);
    }

    static Contract of(String json) {
      JsonNode spec;
      try {
        spec = new ObjectMapper().readTree(json);
      } catch (IOException err) {
        throw new UncheckedIOException(err);
      }
      List<Field> fields = new ArrayList<>();
      int eventTime = -1;
      for (JsonNode f : spec.get("fields")) {
        Field field = new Field(f);
        if (field.name.equals(spec.get("event_time").asText())) {
          eventTime = fields.size();
        }
        fields.add(field);
      }
      return new Contract(fields.toArray(new Field[0]), eventTime, ZoneId.of(spec.get("zone").asText()));
    }
  }

  /** One contract field and its rules. */
  private static final class Field {
    final String name;
    final String type;
    final boolean required;
    final Set<String> allowed;
    final Number minimum;
    final Number maximum;
    final String range;
    final String missing;

    Field(JsonNode f) {
      name = f.get("name").asText();
      type = f.get("type").asText();
      required = f.get("required").asBoolean();
      JsonNode values = f.get("allowed");
      if (values == null || values.isNull()) {
        allowed = null;
      } else {
        allowed = new HashSet<>();
        values.forEach(v -> allowed.add(v.asText()));
      }
      minimum = bound(f.get("minimum"));
      maximum = bound(f.get("maximum"));
      range = f.get("range").asText();
      missing = "missing field " + name;
      if (!List.of("string", "integer", "number", "timestamp").contains(type)) {
        throw new IllegalArgumentException("field " + name + ": unknown type " + type);
      }
    }

    /** A bound as Spark's literal of it compares: a long when integral, else a double. */
    private static Number bound(JsonNode b) {
      if (b == null || b.isNull()) {
        return null;
      }
      return b.isIntegralNumber() && b.canConvertToLong() ? (Number) b.asLong() : (Number) b.asDouble();
    }

    DataType sqlType() {
      switch (type) {
        case "integer":
          return DataTypes.LongType;
        case "number":
          return DataTypes.DoubleType;
        case "timestamp":
          return DataTypes.TimestampType;
        default:
          return DataTypes.StringType;
      }
    }

    /** The typed value of {@code text} (null unless present and well-formed); adds its reasons. */
    Object judge(String text, StringBuilder reasons, ZoneId zone) {
      boolean present = present(text);
      if (required && !present) {
        add(reasons, missing);
      }
      Object typed = null;
      switch (type) {
        case "string":
          typed = present ? text : null;
          break;
        case "timestamp":
          if (present && ISO_8601.matcher(text).find()) {
            Option<Object> micros = DateTimeUtils.stringToTimestamp(UTF8String.fromString(text), zone);
            if (micros.isDefined()) {
              long m = (Long) micros.get();
              typed = Instant.ofEpochSecond(Math.floorDiv(m, 1_000_000L), Math.floorMod(m, 1_000_000L) * 1000L);
            }
          }
          if (present && typed == null) {
            add(reasons, "bad timestamp " + name + ": " + text);
          }
          break;
        default:
          boolean integer = type.equals("integer");
          boolean wellFormed = present && (integer ? INTEGER : NUMBER).matcher(text).find();
          if (present && !wellFormed) {
            add(reasons, name + " is not " + (integer ? "an integer: " : "a number: ") + text);
          }
          if (wellFormed) {
            // not one conditional expression: Java would unbox both to a double
            Number value;
            if (integer) {
              value = toLong(text);
            } else {
              value = toDouble(text);
            }
            typed = value;
            if (!inRange(value)) {
              add(reasons, name + " out of range " + range + ": " + text);
            }
          }
      }
      if (allowed != null && present && !allowed.contains(text)) {
        add(reasons, "unknown " + name + ": " + text);
      }
      return typed;
    }

    private static Long toLong(String text) {
      UTF8String.LongWrapper result = new UTF8String.LongWrapper();
      return UTF8String.fromString(text).toLong(result) ? result.value : null;
    }

    private static Double toDouble(String text) {
      try {
        return Double.parseDouble(text);
      } catch (NumberFormatException err) {
        return null; // the shape admits no special literal (Infinity, NaN) that Spark would read
      }
    }

    /**
     * Spark's comparisons of the typed value with the bounds: as longs when both are, else as
     * doubles (where -0.0 equals 0.0).
     */
    private boolean inRange(Number typed) {
      return typed != null && !below(typed, minimum) && !below(maximum, typed);
    }

    /** Whether {@code a} is less than {@code b}, a value or a bound (null: no bound). */
    private static boolean below(Number a, Number b) {
      if (a == null || b == null) {
        return false;
      }
      if (a instanceof Long && b instanceof Long) {
        return a.longValue() < b.longValue();
      }
      return a.doubleValue() < b.doubleValue();
    }
  }
}
