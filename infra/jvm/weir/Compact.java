package weir;

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
 * target size: each file covers a narrow range of them, apart from its neighbours'.
 *
 * <p>Otherwise as OPTIMIZE does it: the rows are read through the snapshot (deletion vectors
 * applied), the new files and the removal of the old carry {@code dataChange=false} (a stream
 * reading the table sees no new data, and the commit is an OPTIMIZE in the table's history), and
 * only the files rewritten are registered as read. A concurrent append, even into the same
 * partition, does not conflict; a concurrent commit that removes one of the files does, and the
 * caller retries on the new snapshot.
 */
public final class Compact {
  private Compact() {}

  /**
   * Compact the table at {@code path}. In each partition, the files smaller than {@code
   * smallBytes} or carrying a deletion vector are rewritten, when there are two or more of them or
   * one with a deletion vector, sorted by {@code order} into files of about {@code targetBytes}
   * (one per {@code targetBytes} of their size, at least one). One commit per partition, so a
   * conflict (retried by the caller) costs one partition's work.
   * Returns {files removed, files added, partitions rewritten, rows rewritten}.
   */
  public static long[] compact(SparkSession spark, String path, String[] order, long targetBytes,
      long smallBytes) {
    return InsertAbsent.underActive(spark, () ->
        compactActive(spark, path, order, targetBytes, smallBytes));
  }

  private static long[] compactActive(SparkSession spark, String path, String[] order,
      long targetBytes, long smallBytes) {
    DeltaLog log = DeltaLog.forTable(spark, path);
    Snapshot snapshot = log.startTransaction().snapshot();   // for its snapshot: never committed
    Map<scala.collection.immutable.Map<String, String>, List<AddFile>> byPartition =
        new LinkedHashMap<>();
    Column candidate = functions.col("size").lt(smallBytes)
        .or(functions.col("deletionVector").isNotNull());
    for (AddFile file : snapshot.allFiles().filter(candidate).collectAsList()) {
      byPartition.computeIfAbsent(file.partitionValues(), p -> new ArrayList<>()).add(file);
    }
    Column[] sort = Arrays.stream(order).map(c -> functions.col(InsertAbsent.quoted(c)))
        .toArray(Column[]::new);
    long[] done = {0, 0, 0, 0};
    for (List<AddFile> files : byPartition.values()) {
      if (files.size() > 1 || files.get(0).deletionVector() != null) {
        long[] partition = rewrite(log, snapshot, files, sort, targetBytes);
        for (int i = 0; i < done.length; i++) {
          done[i] += partition[i];
        }
      }
    }
    return done;
  }

  /**
   * Rewrite {@code files} (of one partition) sorted by {@code sort}, in a commit of its own on
   * {@code snapshot}, the one they were chosen from: a commit since that removed one of them
   * conflicts, and the partitions committed before stay compacted.
   */
  private static long[] rewrite(DeltaLog log, Snapshot snapshot, List<AddFile> files,
      Column[] sort, long targetBytes) {
    OptimisticTransaction txn = log.startTransaction(Option.empty(), Option.apply(snapshot));
    long bytes = files.stream().mapToLong(AddFile::size).sum();
    int parts = (int) Math.max(1, (bytes + targetBytes - 1) / targetBytes);
    Dataset<Row> read = RowTracking.preserveRowTrackingColumns(
        log.createDataFrame(snapshot, CollectionConverters.asScala(files).toList(), false,
            Option.apply("Optimize")), snapshot);
    Dataset<Row> sorted = (parts == 1 ? read.coalesce(1) : read.repartitionByRange(parts, sort))
        .sortWithinPartitions(sort);
    Seq<Constraint> noConstraints = CollectionConverters.asScala(List.<Constraint>of()).toList();
    List<Action> actions = new ArrayList<>();
    long added = 0;
    long rows = 0;
    for (FileAction action : CollectionConverters.asJava(
        txn.writeFiles(sorted, Option.empty(), true, noConstraints))) {
      AddFile add = (AddFile) action;
      actions.add(add.copy(add.path(), add.partitionValues(), add.size(),
          add.modificationTime(), false, add.stats(), add.tags(), add.deletionVector(),
          add.baseRowId(), add.defaultRowCommitVersion(), add.clusteringProvider(),
          add.backReference(), add.amtPassthrough()));
      added++;
      rows += add.numLogicalRecords().isDefined() ? (Long) add.numLogicalRecords().get() : 0;
    }
    long now = System.currentTimeMillis();
    for (AddFile file : files) {
      actions.add(file.removeWithTimestamp(now, false));
    }
    txn.trackFilesRead(CollectionConverters.asScala(files).toList());
    Seq<Expression> none = CollectionConverters.asScala(List.<Expression>of()).toList();
    Seq<String> noColumns = CollectionConverters.asScala(List.<String>of()).toList();
    txn.commit(CollectionConverters.asScala(actions).toList(),
        new DeltaOperations.Optimize(none, noColumns, false, Option.empty(), false),
        RowTracking$.MODULE$.addPreservedRowTrackingTagIfNotSet(snapshot,
            scala.collection.immutable.Map$.MODULE$.<String, String>empty()));
    return new long[] {files.size(), added, 1, rows};
  }
}
