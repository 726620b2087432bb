package weir;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.Column;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.delta.DeltaColumnMapping$;
import org.apache.spark.sql.delta.DeltaLog;
import org.apache.spark.sql.delta.DeltaOperations;
import org.apache.spark.sql.delta.OptimisticTransaction;
import org.apache.spark.sql.delta.RowTracking;
import org.apache.spark.sql.delta.RowTracking$;
import org.apache.spark.sql.delta.Snapshot;
import org.apache.spark.sql.delta.actions.Action;
import org.apache.spark.sql.delta.actions.AddFile;
import org.apache.spark.sql.delta.actions.FileAction;
import org.apache.spark.sql.delta.constraints.Constraint;
import org.apache.spark.sql.functions;
import scala.Option;
import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;

/**
 * Compaction that keeps each file's statistics narrow for the reads that skip files by them.
 *
 * <p>Delta's OPTIMIZE bin-packs a partition's small files in order of size, so a compacted file
 * holds the rows of every file it replaced in no order and its min/max statistics span them all.
 * Weir's reads skip files by those statistics: a stream batch looks its lines up in bronze and
 * quarantine by ranges of (source, position), and a back-fill reads the bronze files whose
 * {@code event_date_hint} can hold its dates. Bin-packed, each file of a day of bronze spans the
 * day's sources and dates, and every such read opens them all. Here a partition's small files are
 * rewritten sorted by the columns given and range-partitioned on them into files of about the
 * target size: each file covers a narrow range of them, apart from its neighbours'. A column may
 * also be cut at: no file then holds two of its values (bronze's dates, which the stream also
 * writes a date per file), so the read of one value opens only its own files.
 *
 * <p>Otherwise as OPTIMIZE does it: the rows are read through the snapshot (deletion vectors
 * applied), the new files and the removal of the old carry {@code dataChange=false} (a stream
 * reading the table sees no new data, and the commit is an OPTIMIZE in the table's history), and
 * only the files rewritten are registered as read. A concurrent append, even into the same
 * partition, does not conflict; a concurrent commit that removes one of the files does, and the
 * caller retries on the new snapshot.
 */
public final class Compact {
  /** A file's value of the cut column when every row holds null. */
  private static final String ALL_NULL = "\u0000all null";
  private static final ObjectMapper JSON = new ObjectMapper();

  private Compact() {}

  /**
   * Compact the table at {@code path}. In each partition, the files smaller than {@code
   * smallBytes} or carrying a deletion vector are rewritten, when there are two or more of them or
   * one with a deletion vector, sorted by {@code order} into files of about {@code targetBytes}
   * (one per {@code targetBytes} of their size, at least one). With {@code cut} (null: none), no
   * file is written holding two values of that column: the files holding one value (by their
   * statistics) are compacted with that value's only, and files that mix values are rewritten
   * with the partition's others split by value ({@link ByValue}). One commit per partition, so a
   * conflict (retried by the caller) costs one partition's work.
   * Returns {files removed, files added, partitions rewritten, rows rewritten}.
   */
  public static long[] compact(SparkSession spark, String path, String[] order, long targetBytes,
      long smallBytes, String cut) {
    return InsertAbsent.underActive(spark, () ->
        compactActive(spark, path, order, targetBytes, smallBytes, cut));
  }

  private static long[] compactActive(SparkSession spark, String path, String[] order,
      long targetBytes, long smallBytes, String cut) {
    DeltaLog log = DeltaLog.forTable(spark, path);
    Snapshot snapshot = log.startTransaction().snapshot();   // for its snapshot: never committed
    Map<scala.collection.immutable.Map<String, String>, List<AddFile>> byPartition =
        new LinkedHashMap<>();
    Column candidate = functions.col("size").lt(smallBytes)
        .or(functions.col("deletionVector").isNotNull());
    for (AddFile file : snapshot.allFiles().filter(candidate).collectAsList()) {
      byPartition.computeIfAbsent(file.partitionValues(), p -> new ArrayList<>()).add(file);
    }
    String statsName = cut == null ? null
        : DeltaColumnMapping$.MODULE$.getPhysicalName(snapshot.schema().apply(cut));
    long[] done = {0, 0, 0, 0};
    for (List<AddFile> files : byPartition.values()) {
      List<Group> groups = cut == null ? List.of(new Group(files, false)) : byValue(files, statsName);
      List<Group> due = groups.stream().filter(Group::due).toList();
      if (!due.isEmpty()) {
        long[] partition = rewrite(log, snapshot, due, order, targetBytes, cut);
        for (int i = 0; i < done.length; i++) {
          done[i] += partition[i];
        }
      }
    }
    return done;
  }

  /** Files rewritten together; {@code mixed}: holding several values of the cut column. */
  private record Group(List<AddFile> files, boolean mixed) {
    boolean due() {
      return files.size() > 1 || mixed || files.get(0).deletionVector() != null;
    }
  }

  /**
   * A partition's files grouped by the one value of column {@code statsName} (as Delta's
   * statistics name it) each holds: a group per value. When any file holds several values (or
   * has no statistics of it), all of them form one mixed group, rewritten split by value.
   */
  private static List<Group> byValue(List<AddFile> files, String statsName) {
    Map<String, List<AddFile>> byValue = new LinkedHashMap<>();
    for (AddFile file : files) {
      String value = onlyValue(file, statsName);
      if (value == null) {
        return List.of(new Group(files, true));
      }
      byValue.computeIfAbsent(value, v -> new ArrayList<>()).add(file);
    }
    return byValue.values().stream().map(g -> new Group(g, false)).toList();
  }

  /** The one value of column {@code name} that {@code file}'s statistics give it (as their JSON
   * text), {@link #ALL_NULL} when every row holds null, else null: several, or unknown. */
  private static String onlyValue(AddFile file, String name) {
    if (file.stats() == null) {
      return null;
    }
    try {
      JsonNode stats = JSON.readTree(file.stats());
      JsonNode nulls = stats.path("nullCount").path(name);
      JsonNode rows = stats.path("numRecords");
      if (nulls.isNumber() && rows.isNumber() && nulls.asLong() == rows.asLong()) {
        return ALL_NULL;
      }
      JsonNode min = stats.path("minValues").path(name);
      JsonNode max = stats.path("maxValues").path(name);
      boolean one = !min.isMissingNode() && min.equals(max) && nulls.isNumber()
          && nulls.asLong() == 0;
      return one ? min.toString() : null;
    } catch (JsonProcessingException e) {
      return null;
    }
  }

  /**
   * Rewrite the {@code groups} (of one partition) sorted by {@code order}, each group into files
   * of its own, in one commit on {@code snapshot}, the one they were chosen from: a commit since
   * that removed one of them conflicts, and the partitions committed before stay compacted. A
   * mixed group is split by the values of {@code cut}.
   */
  private static long[] rewrite(DeltaLog log, Snapshot snapshot, List<Group> groups,
      String[] order, long targetBytes, String cut) {
    OptimisticTransaction txn = log.startTransaction(Option.empty(), Option.apply(snapshot));
    Column[] sort = Arrays.stream(order).map(c -> functions.col(InsertAbsent.quoted(c)))
        .toArray(Column[]::new);
    Seq<Constraint> noConstraints = CollectionConverters.asScala(List.<Constraint>of()).toList();
    List<Action> actions = new ArrayList<>();
    List<AddFile> removed = new ArrayList<>();
    long added = 0;
    long rows = 0;
    for (Group group : groups) {
      long bytes = group.files().stream().mapToLong(AddFile::size).sum();
      int parts = (int) Math.max(1, (bytes + targetBytes - 1) / targetBytes);
      Dataset<Row> read = RowTracking.preserveRowTrackingColumns(
          log.createDataFrame(snapshot, CollectionConverters.asScala(group.files()).toList(), false,
              Option.apply("Optimize")), snapshot);
      Dataset<Row> laid = group.mixed() ? splitByValue(read, cut, parts, order)
          : parts == 1 ? read.coalesce(1) : read.repartitionByRange(parts, sort);
      for (FileAction action : CollectionConverters.asJava(
          txn.writeFiles(laid.sortWithinPartitions(sort), Option.empty(), true, noConstraints))) {
        AddFile add = (AddFile) action;
        actions.add(add.copy(add.path(), add.partitionValues(), add.size(),
            add.modificationTime(), false, add.stats(), add.tags(), add.deletionVector(),
            add.baseRowId(), add.defaultRowCommitVersion(), add.clusteringProvider(),
            add.backReference(), add.amtPassthrough()));
        added++;
        rows += add.numLogicalRecords().isDefined() ? (Long) add.numLogicalRecords().get() : 0;
      }
      removed.addAll(group.files());
    }
    long now = System.currentTimeMillis();
    for (AddFile file : removed) {
      actions.add(file.removeWithTimestamp(now, false));
    }
    txn.trackFilesRead(CollectionConverters.asScala(removed).toList());
    Seq<Expression> none = CollectionConverters.asScala(List.<Expression>of()).toList();
    Seq<String> noColumns = CollectionConverters.asScala(List.<String>of()).toList();
    txn.commit(CollectionConverters.asScala(actions).toList(),
        new DeltaOperations.Optimize(none, noColumns, false, Option.empty(), false),
        RowTracking$.MODULE$.addPreservedRowTrackingTagIfNotSet(snapshot,
            scala.collection.immutable.Map$.MODULE$.<String, String>empty()));
    return new long[] {removed.size(), added, 1, rows};
  }

  /** {@code read} split by the values of {@code cut}, each value's rows over its share of
   * {@code parts} partitions, spread by the other columns of {@code order}: one aggregate of the
   * values first (their rows as weights), then {@link ByValue}. */
  private static Dataset<Row> splitByValue(Dataset<Row> read, String cut, int parts,
      String[] order) {
    List<Row> counts = read.groupBy(functions.col(InsertAbsent.quoted(cut)).cast("string"))
        .count().collectAsList();
    String[] values = counts.stream().map(r -> r.isNullAt(0) ? null : r.getString(0))
        .toArray(String[]::new);
    long[] weights = counts.stream().mapToLong(r -> r.getLong(1)).toArray();
    String[] spread = Arrays.stream(order).filter(c -> !c.equals(cut)).toArray(String[]::new);
    return ByValue.repartition(read, cut, values, weights, parts,
        spread.length > 0 ? spread : order, null);
  }
}
