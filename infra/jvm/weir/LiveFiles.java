package weir;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.time.LocalDate;
import java.time.format.DateTimeParseException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.spark.network.util.JavaUtils;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.expressions.And;
import org.apache.spark.sql.catalyst.expressions.AttributeReference;
import org.apache.spark.sql.catalyst.expressions.BinaryComparison;
import org.apache.spark.sql.catalyst.expressions.EqualTo;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.GreaterThan;
import org.apache.spark.sql.catalyst.expressions.GreaterThanOrEqual;
import org.apache.spark.sql.catalyst.expressions.In;
import org.apache.spark.sql.catalyst.expressions.InSet;
import org.apache.spark.sql.catalyst.expressions.IsNotNull;
import org.apache.spark.sql.catalyst.expressions.IsNull;
import org.apache.spark.sql.catalyst.expressions.LessThan;
import org.apache.spark.sql.catalyst.expressions.LessThanOrEqual;
import org.apache.spark.sql.catalyst.expressions.Literal;
import org.apache.spark.sql.catalyst.expressions.Or;
import org.apache.spark.sql.delta.DeltaLog;
import org.apache.spark.sql.delta.NoMapping$;
import org.apache.spark.sql.delta.OptimisticTransaction;
import org.apache.spark.sql.delta.Snapshot;
import org.apache.spark.sql.delta.VersionChecksum;
import org.apache.spark.sql.delta.actions.Action;
import org.apache.spark.sql.delta.actions.AddFile;
import org.apache.spark.sql.delta.actions.FileAction;
import org.apache.spark.sql.delta.actions.Metadata;
import org.apache.spark.sql.delta.actions.RemoveFile;
import org.apache.spark.sql.types.ByteType$;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.IntegerType$;
import org.apache.spark.sql.types.LongType$;
import org.apache.spark.sql.types.ShortType$;
import org.apache.spark.unsafe.types.UTF8String;
import scala.Option;
import scala.Tuple2;
import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;

/**
 * The live files of Delta tables, kept in the driver and brought forward commit by commit.
 *
 * <p>Delta lists a snapshot's files from its reconstructed state: Spark jobs over the table's
 * last checkpoint and every commit after it, run again for each new version. A stream's batch
 * makes a new version of every table it writes, so every write of the next batch paid that
 * rebuild before it could skip a file: 0.8-0.9 s a table on two cores, against 0.1 s for the
 * same listing of a snapshot already rebuilt, and 0.4 s for a whole 50-row append
 * (docs/performance.md). Here a table's files are those of the last version listed, plus the
 * files added and less those removed by the commits since, read from their JSON on the driver,
 * as Delta's own streaming source reads a table's changes.
 *
 * <p>Exact or not used: a table recreated at the same path (another table id), a snapshot older
 * than the version kept, a commit no longer in the log, or column mapping: Delta lists the files,
 * as before. Bounded: the lists kept weigh at most the session's {@value #MAX_BYTES} (unset, a
 * 32nd of the driver's heap), by an estimate of each file's action and statistics in memory; a
 * table whose list alone weighs more is listed by Delta at every write (a stream's table gains one
 * file a batch between compactions: thousands a day at a short trigger, which the daily compaction
 * folds). A file is named by its path and its deletion vector, as Delta's state names it, so a
 * vector added or taken away (a restore) replaces the entry. The files are then skipped by their
 * statistics, conservatively: a file is left out only when its minimum and maximum prove no row
 * of it can meet a conjunct (the comparisons of a column with literals that Weir's prunes are
 * made of); any other condition keeps it. The conditions and the files are registered with the
 * transaction as Delta's {@code filterFiles} registers them, so a concurrent commit conflicts
 * exactly as it did.
 */
final class LiveFiles {
  /** The lists' bound in bytes (Spark's size syntax, such as {@code 64m}): a session's setting;
   * unset, a 32nd of the driver's heap. */
  public static final String MAX_BYTES = "spark.weir.liveFiles.maxBytes";
  /** Bytes a file's entry is taken to weigh beyond the text of its path and statistics (one
   * byte a character, as the JVM keeps Latin-1 text): the action's objects. */
  private static final long ENTRY_BYTES = 512;
  /** What a file's entry is taken to weigh before its statistics are read: a table whose checksum
   * counts more files than fit at this weight is not listed here at all. */
  private static final long FIRST_GUESS_BYTES = 2048;
  private static final ObjectMapper JSON = new ObjectMapper();
  /** By the table's path. */
  private static final Map<String, Listed> TABLES = new ConcurrentHashMap<>();

  /** One version's live files, by their names; never changed once built. */
  private record Listed(String tableId, long version, Map<String, Live> files, long bytes) {}

  /** A live file and its estimated weight in bytes. */
  private record Live(AddFile add, long bytes) {}

  private LiveFiles() {}

  /**
   * The files of {@code txn}'s snapshot that may hold a row meeting every one of {@code filters}
   * (resolved against the table, optimized), registered as read: what {@code txn.filterFiles}
   * returns, without rebuilding the snapshot's state.
   */
  static Seq<AddFile> filter(DeltaLog log, OptimisticTransaction txn, List<Expression> filters) {
    Seq<Expression> conditions = CollectionConverters.asScala(filters).toList();
    Snapshot snapshot = txn.snapshot();
    Listed listed = NoMapping$.MODULE$.equals(snapshot.metadata().columnMappingMode())
        ? listed(log, snapshot) : null;
    if (listed == null) {
      return txn.filterFiles(conditions, true);
    }
    Set<String> partitions = Set.copyOf(
        CollectionConverters.asJava(snapshot.metadata().partitionColumns()));
    List<AddFile> kept = new ArrayList<>();
    for (Live f : listed.files().values()) {
      if (mayHold(f.add(), filters, partitions)) {
        kept.add(f.add());
      }
    }
    Seq<AddFile> files = CollectionConverters.asScala(kept).toList();
    txn.trackReadPredicates(conditions, false, true);
    txn.trackFilesRead(files);
    return files;
  }

  /** The live files of {@code snapshot} ({@link #listed}), or null when they are not listed here
   * (a table too large for the driver): the caller then asks Delta. */
  static Iterable<AddFile> live(DeltaLog log, Snapshot snapshot) {
    Listed listed = listed(log, snapshot);
    return listed == null ? null : () -> listed.files().values().stream().map(Live::add).iterator();
  }

  /** The live files of {@code snapshot}, brought forward from the version kept when it can be,
   * else listed by Delta; kept for the next write when the lists fit their bound. Null for a table
   * too large to list in the driver: Delta then skips its files where they are read, as before. */
  private static Listed listed(DeltaLog log, Snapshot snapshot) {
    long capacity = bytesSetting(SparkSession.active(), MAX_BYTES, 32);
    String table = log.dataPath().toUri().toString();
    String id = snapshot.metadata().id();
    long version = snapshot.version();
    Listed kept = TABLES.get(table);
    Listed now = null;
    if (kept != null && kept.tableId().equals(id) && kept.version() <= version) {
      now = kept.version() == version ? kept : forward(log, kept, version);
    }
    if (now == null) {
      Option<VersionChecksum> checksum = snapshot.checksumOpt();
      if (checksum.isDefined() && checksum.get().numFiles() * FIRST_GUESS_BYTES > capacity) {
        TABLES.remove(table);
        return null;
      }
      Map<String, Live> files = new HashMap<>();
      long bytes = 0;
      for (AddFile add : snapshot.allFiles().collectAsList()) {
        Live f = live(add);
        files.put(name(log, add), f);
        bytes += f.bytes();
      }
      now = new Listed(id, version, files, bytes);
    }
    keep(table, now, capacity);
    return now;
  }

  /** Keep {@code listed} as {@code table}'s newest list, unless it alone weighs more than
   * {@code capacity}; other tables' lists go while all of them weigh more. */
  private static void keep(String table, Listed listed, long capacity) {
    if (listed.bytes() > capacity) {
      TABLES.remove(table);
      return;
    }
    TABLES.merge(table, listed, (old, neu) ->
        !old.tableId().equals(neu.tableId()) || neu.version() >= old.version() ? neu : old);
    long held = TABLES.values().stream().mapToLong(Listed::bytes).sum();
    for (String other : List.copyOf(TABLES.keySet())) {
      if (held <= capacity) {
        break;
      }
      if (!other.equals(table)) {
        Listed gone = TABLES.remove(other);
        held -= gone == null ? 0 : gone.bytes();
      }
    }
  }

  /** {@code kept} brought forward to {@code version} by the commits after it, or null when a
   * commit is missing or names another table. */
  private static Listed forward(DeltaLog log, Listed kept, long version) {
    Map<String, Live> files = new HashMap<>(kept.files());
    long bytes = kept.bytes();
    long expected = kept.version() + 1;
    scala.collection.Iterator<Tuple2<Object, Seq<Action>>> commits;
    try {
      commits = log.getChanges(expected, version, Option.empty(), true);
    } catch (RuntimeException gone) {   // a commit cleaned from the log: list as Delta does
      return null;
    }
    while (commits.hasNext()) {
      Tuple2<Object, Seq<Action>> commit = commits.next();
      if ((Long) commit._1() != expected) {
        return null;
      }
      for (Action a : CollectionConverters.asJava(commit._2())) {
        if (a instanceof AddFile add) {
          Live f = live(add);
          Live replaced = files.put(name(log, add), f);
          bytes += f.bytes() - (replaced == null ? 0 : replaced.bytes());
        } else if (a instanceof RemoveFile remove) {
          Live gone = files.remove(name(log, remove));
          bytes -= gone == null ? 0 : gone.bytes();
        } else if (a instanceof Metadata m && !m.id().equals(kept.tableId())) {
          return null;
        }
      }
      expected++;
    }
    return expected == version + 1 ? new Listed(kept.tableId(), version, files, bytes) : null;
  }

  /** A session's setting of a size in bytes (Spark's syntax, such as {@code 64m}); unset, the
   * driver's heap divided by {@code heapDivisor}. */
  static long bytesSetting(SparkSession spark, String key, long heapDivisor) {
    String bytes = spark.conf().get(key, null);
    return bytes == null ? Runtime.getRuntime().maxMemory() / heapDivisor
        : JavaUtils.byteStringAsBytes(bytes);
  }

  /** A file's name in a table's state: its path and its deletion vector. */
  static String name(DeltaLog log, FileAction f) {
    return f.absolutePath(log).toUri() + "#"
        + (f.deletionVector() == null ? "" : f.deletionVector().uniqueId());
  }

  private static Live live(AddFile add) {
    return new Live(add, ENTRY_BYTES + add.path().length()
        + (add.stats() == null ? 0 : add.stats().length()));
  }

  /** False only when {@code f}'s statistics prove that none of its rows meets all of
   * {@code conditions} ({@link #mayMeet}); its statistics are read only when there are some. */
  static boolean mayHold(AddFile f, List<Expression> conditions, Set<String> partitions) {
    if (conditions.isEmpty()) {
      return true;
    }
    JsonNode stats = stats(f);
    return conditions.stream().allMatch(c -> mayMeet(c, stats, partitions));
  }

  /** A file's statistics, parsed each time a prune needs them rather than kept parsed (a tree of
   * nodes weighs several times its text); null when it has none or they cannot be read, and the
   * file is always read. */
  private static JsonNode stats(AddFile add) {
    if (add.stats() == null) {
      return null;
    }
    try {
      return JSON.readTree(add.stats());
    } catch (java.io.IOException unreadable) {
      return null;
    }
  }

  /**
   * False only when the file's statistics prove that none of its rows meets {@code c}: its
   * minimum and maximum of a column compared with literals, and its count of nulls against IS
   * NULL and IS NOT NULL, under AND and OR. Every other condition, a partition column, a type
   * other than integers, dates and plain strings, or a missing statistic keeps the file.
   */
  private static boolean mayMeet(Expression c, JsonNode stats, Set<String> partitions) {
    if (stats == null) {
      return true;
    }
    if (c instanceof And and) {
      return mayMeet(and.left(), stats, partitions) && mayMeet(and.right(), stats, partitions);
    }
    if (c instanceof Or or) {
      return mayMeet(or.left(), stats, partitions) || mayMeet(or.right(), stats, partitions);
    }
    if (c instanceof IsNull isNull && isNull.child() instanceof AttributeReference column) {
      return nulls(column, stats, partitions) != 0;
    }
    if (c instanceof IsNotNull notNull && notNull.child() instanceof AttributeReference column) {
      JsonNode rows = stats.path("numRecords");
      return !rows.canConvertToLong() || nulls(column, stats, partitions) != rows.asLong();
    }
    if (c instanceof In in && in.value() instanceof AttributeReference column) {
      for (Expression v : CollectionConverters.asJava(in.list())) {
        if (!(v instanceof Literal lit) || within(column, lit.value(), lit.dataType(), stats,
            partitions)) {
          return true;
        }
      }
      return false;
    }
    if (c instanceof InSet in && in.child() instanceof AttributeReference column) {
      for (Object v : CollectionConverters.asJava(in.hset())) {
        if (within(column, v, column.dataType(), stats, partitions)) {
          return true;
        }
      }
      return false;
    }
    if (c instanceof BinaryComparison cmp) {
      if (cmp.left() instanceof AttributeReference column && cmp.right() instanceof Literal lit) {
        return compared(cmp, false, column, lit, stats, partitions);
      }
      if (cmp.right() instanceof AttributeReference column && cmp.left() instanceof Literal lit) {
        return compared(cmp, true, column, lit, stats, partitions);
      }
    }
    return true;
  }

  /** The file's count of nulls in {@code column}, or -1 when it is unknown. */
  private static long nulls(AttributeReference column, JsonNode stats, Set<String> partitions) {
    JsonNode count = stats.path("nullCount").path(column.name());
    return partitions.contains(column.name()) || !count.canConvertToLong() ? -1 : count.asLong();
  }

  /** Whether a row of the file may have {@code column} = {@code value}. */
  private static boolean within(AttributeReference column, Object value, DataType type,
      JsonNode stats, Set<String> partitions) {
    Integer low = compare(column, value, type, stats, "minValues", partitions);
    Integer high = compare(column, value, type, stats, "maxValues", partitions);
    return low == null || high == null || (low <= 0 && high >= 0);
  }

  /** {@code column <op> lit} ({@code flipped}: {@code lit <op> column}) against the file's
   * minimum and maximum. */
  private static boolean compared(BinaryComparison cmp, boolean flipped,
      AttributeReference column, Literal lit, JsonNode stats, Set<String> partitions) {
    if (cmp instanceof EqualTo) {
      return within(column, lit.value(), lit.dataType(), stats, partitions);
    }
    boolean greater = cmp instanceof GreaterThan || cmp instanceof GreaterThanOrEqual;
    if (!greater && !(cmp instanceof LessThan || cmp instanceof LessThanOrEqual)) {
      return true;
    }
    boolean above = greater != flipped;   // lit < column is column > lit
    boolean strict = cmp instanceof GreaterThan || cmp instanceof LessThan;
    if (above) {   // column > or >= lit: the file's maximum must reach it
      Integer high = compare(column, lit.value(), lit.dataType(), stats, "maxValues", partitions);
      return high == null || (strict ? high > 0 : high >= 0);
    }
    Integer low = compare(column, lit.value(), lit.dataType(), stats, "minValues", partitions);
    return low == null || (strict ? low < 0 : low <= 0);
  }

  /**
   * The file's statistic {@code which} of {@code column} compared with {@code value} (negative:
   * the statistic is smaller), or null when it is unknown or not comparable here. Delta
   * truncates a long string's minimum to a prefix (never above the true minimum) and its maximum
   * to one never below the true maximum, so the comparisons stay conservative.
   */
  private static Integer compare(AttributeReference column, Object value, DataType type,
      JsonNode stats, String which, Set<String> partitions) {
    if (value == null || partitions.contains(column.name()) || !type.equals(column.dataType())) {
      return null;
    }
    JsonNode stat = stats.path(which).path(column.name());
    if (stat.isMissingNode() || stat.isNull()) {
      return null;
    }
    if (type.equals(LongType$.MODULE$) || type.equals(IntegerType$.MODULE$)
        || type.equals(ShortType$.MODULE$) || type.equals(ByteType$.MODULE$)) {
      return stat.canConvertToLong() && value instanceof Number n
          ? Long.compare(stat.asLong(), n.longValue()) : null;
    }
    if (type.equals(DataTypes.StringType) && stat.isTextual() && value instanceof UTF8String s) {
      return Integer.signum(UTF8String.fromString(stat.asText()).compareTo(s));
    }
    if (type.equals(DataTypes.DateType) && stat.isTextual() && value instanceof Integer days) {
      try {   // a date's statistic is its ISO text; the literal, days since the epoch
        return Long.compare(LocalDate.parse(stat.asText()).toEpochDay(), days);
      } catch (DateTimeParseException unreadable) {
        return null;
      }
    }
    return null;
  }
}
