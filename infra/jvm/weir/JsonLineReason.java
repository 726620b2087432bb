package weir;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.core.JsonToken;
import java.io.IOException;
import org.apache.spark.sql.api.java.UDF1;

/**
 * Why a line is not exactly one JSON object, or null when it is (whitespace around it allowed).
 *
 * <p>Spark's from_json reads the first value of a line and ignores what follows, so
 * {@code {...}{...}} or {@code {...} junk} would half-pass. This parses the whole line with
 * Jackson's strict defaults (no single quotes, NaN or leading zeros) and requires the object to be
 * the line's only token. Registered as {@code weir_json_line_reason} by spark_jobs.session.
 */
public final class JsonLineReason implements UDF1<String, String> {
  private static final long serialVersionUID = 1L;
  private static final JsonFactory FACTORY = new JsonFactory();

  @Override
  public String call(String line) {
    if (line == null) {
      return null;
    }
    try (JsonParser parser = FACTORY.createParser(line)) {
      JsonToken first = parser.nextToken();
      if (first == null) {
        return null; // blank: the caller names it an empty line
      }
      if (first != JsonToken.START_OBJECT) {
        return "malformed JSON: not an object";
      }
      parser.skipChildren();
      JsonToken next;
      try {
        next = parser.nextToken();
      } catch (JsonProcessingException trailing) {
        return "malformed JSON: trailing characters after the object";
      }
      if (next != null) {
        return "malformed JSON: more than one JSON value on the line";
      }
      return null;
    } catch (JsonProcessingException err) {
      return "malformed JSON";
    } catch (IOException err) {
      return "malformed JSON";
    }
  }
}
