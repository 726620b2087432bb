package weir;

import java.net.URI;
import java.nio.LongBuffer;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.function.Supplier;
import org.apache.hadoop.fs.Path;
import org.apache.spark.sql.Column;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SaveMode;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.expressions.And;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.plans.logical.Filter;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.delta.DeltaLog;
import org.apache.spark.sql.delta.DeltaOperations;
import org.apache.spark.sql.delta.OptimisticTransaction;
import org.apache.spark.sql.delta.VersionChecksum;
import org.apache.spark.sql.delta.actions.Action;
import org.apache.spark.sql.delta.actions.AddFile;
import org.apache.spark.sql.delta.actions.FileAction;
import org.apache.spark.sql.delta.actions.SetTransaction;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import scala.Option;
import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;

/**
 * Insert the rows whose key a Delta table does not hold yet, in one transaction that reads the
 * table's keys and commits the new rows: what an insert-only MERGE does, without its shuffle.
 *
 * <p>The transaction reads the files where a key of the batch can stand (for silver every file:
 * an event re-sent with another event time stands under another partition), but only their key
 * columns; the batch's keys (bounded by the source's batch bound) are broadcast against them, and
 * the few keys found are broadcast back to drop their rows: the insert shuffles no row. A MERGE
 * shuffled all of the batch's rows to join against the partitions' keys (docs/performance.md).
 * The table's files are listed by {@link LiveFiles}, from the driver's list of the version the
 * last write saw brought forward by the commits since, not from a rebuild of the new snapshot's
 * state (which each batch's new version of the table cost every write).
 *
 * <p>Exact beside concurrent writers: the read is registered with the transaction, so a commit
 * that lands after its snapshot and adds or removes data (a back-fill's MERGE) makes this commit
 * fail with Delta's concurrent-modification error, and the caller retries on the new snapshot;
 * the commit is not a blind append, so a back-fill that read before it conflicts too.
 *
 * <p>Fencing: with an application id, the transaction reads its version (so a concurrent commit
 * carrying the same id conflicts) and commits nothing when the table already carries this version
 * or a higher one, as Delta's own writers skip such a write; otherwise it records the version.
 *
 * <p>Key hashes: given the key's 64-bit hash as SQL ({@code xxhash64} of the key), a table is read
 * in two steps. The batch's hashes against each file's name the files where a key of the batch may
 * stand; only those files' keys are then compared in full. A file's hashes are read from the
 * column Delta generates as that expression where the table has one (silver's {@code _key_hash}),
 * else computed from its key columns. Each file's hashes are read once and kept in the driver,
 * sorted ({@link KeyHashes}): a batch reads the hashes only of the files written since the batch
 * before, and looks its hashes up in the others' in memory, so its cost no longer grows with a
 * scan of the table (docs/performance.md). A hash that two keys share costs a file read, never a
 * row, and Delta itself keeps a generated column equal to its expression on every write, whoever
 * the writer.
 */
public final class InsertAbsent {
  /** The key-hash cache's capacity in bytes (Spark's size syntax, such as {@code 256m}): a
   * session's setting; unset, an eighth of the driver's heap. */
  public static final String CACHE_BYTES = "spark.weir.keyHashCache.maxBytes";
  /** At most this many hashes are loaded into the cache by one job: the driver collects them. */
  private static final long LOAD_CHUNK_ROWS = 2_000_000;
  /** Where Delta keeps a generated column's expression, in the field's metadata. */
  private static final String GENERATION_EXPRESSION = "delta.generationExpression";

  private InsertAbsent() {}

  /**
   * Insert the rows of {@code rows} (unique by {@code key}) whose key the table at {@code path}
   * does not hold. {@code batchKeys} are the keys looked up (null: those of {@code rows}); any
   * superset of them will do, such as the keys of the rows before a dedupe, whose plan is cheaper
   * to run twice than the rows'. {@code keyHash} is the key's hash as SQL, the generation
   * expression of the table's key-hash column if it has one (null: every file's keys are read).
   * {@code prune} (SQL on the table's columns, qualified {@code t.}; null: the whole table)
   * bounds where a key of {@code rows} can stand: only the files Delta's statistics cannot rule
   * out are read, and only they are registered as read. Returns {rows inserted, files whose keys
   * were read, files whose key hashes were read (the others' came from {@link KeyHashes}), files
   * whose key hashes were compared}; rows inserted is -1 when the write was skipped because the
   * table already carries {@code appId} at {@code version} or above.
   */
  public static long[] insert(SparkSession spark, String path, Dataset<Row> rows,
      Dataset<Row> batchKeys, String[] key, String keyHash, String prune, String appId,
      long version) {
    return underActive(spark, () ->
        insertActive(spark, path, rows, batchKeys, key, keyHash, prune, appId, version));
  }

  /**
   * The rows of the table at {@code path} whose key ({@code key}) is among {@code batchKeys}'s:
   * where a table already holds a batch's keys (the session table: a session a late event moves
   * to an earlier date still stands under its old one). The batch's keys (bounded by the caller:
   * one micro-batch's) are broadcast against the table's, and only the files that may hold one are
   * read: with {@code keyHash} (null: every file is read), the files whose key hashes, from the
   * driver's {@link KeyHashes} as {@link #insert} finds them, meet the batch's. A table without a
   * hash column has each file's hashes computed from its key as the file is first read, so a
   * batch reads the keys of the files written since the batch before, not of the whole table. A
   * read of the latest snapshot, in no transaction.
   */
  public static Dataset<Row> held(SparkSession spark, String path, Dataset<Row> batchKeys,
      String[] key, String keyHash) {
    return underActive(spark, () -> {
      DeltaLog log = DeltaLog.forTable(spark, path);
      OptimisticTransaction read = log.startTransaction();   // for its snapshot: never committed
      StructType schema = read.snapshot().schema();
      Seq<AddFile> files = LiveFiles.filter(log, read, List.of());
      Dataset<Row> wanted = typedKeys(batchKeys, key, schema);
      Seq<AddFile> candidates = keyHash != null && !files.isEmpty()
          ? mayHold(spark, log, read, files, wanted, hashOf(schema, keyHash), keyHash, new long[1])
          : files;
      return log.createDataFrame(read.snapshot(), candidates, false, Option.empty())
          .join(functions.broadcast(wanted), key, "left_semi");
    });
  }

  /**
   * {@code body} with {@code spark} the thread's active session. The stream calls in from write
   * threads of its own, whose JVM threads (PySpark's pinned threads) have no active session, and
   * Delta loads a snapshot's checkpoint only under one: the first load of a snapshot that another
   * writer checkpointed failed there.
   */
  static <T> T underActive(SparkSession spark, Supplier<T> body) {
    Option<SparkSession> before = SparkSession.getActiveSession();
    SparkSession.setActiveSession(spark);
    try {
      return body.get();
    } finally {
      if (before.isDefined()) {
        SparkSession.setActiveSession(before.get());
      } else {
        SparkSession.clearActiveSession();
      }
    }
  }

  /** The keys of {@code batchKeys} as the table types them: a hash is of the typed value. */
  private static Dataset<Row> typedKeys(Dataset<Row> batchKeys, String[] key, StructType schema) {
    return batchKeys.select(Arrays.stream(key)
        .map(k -> functions.col(quoted(k)).cast(schema.apply(k).dataType()).alias(k))
        .toArray(Column[]::new));
  }

  /** A file's key hashes: the column Delta generates as {@code keyHash} when the table has one,
   * else {@code keyHash} computed from the key columns as the file is read. */
  private static Column hashOf(StructType schema, String keyHash) {
    String generated = generatedAs(schema, keyHash);
    return generated != null ? functions.col(quoted(generated)) : functions.expr(keyHash);
  }

  private static long[] insertActive(SparkSession spark, String path, Dataset<Row> rows,
      Dataset<Row> batchKeys, String[] key, String keyHash, String prune, String appId,
      long version) {
    DeltaLog log = DeltaLog.forTable(spark, path);
    OptimisticTransaction txn = log.startTransaction();
    if (appId != null && txnVersion(txn, appId) >= version) {
      return new long[] {-1, 0, 0, 0};
    }
    StructType schema = txn.snapshot().schema();
    // what is read is registered with the transaction: a concurrent change to it conflicts
    // with their row counts: the key-hash cache makes room for a file by them
    Seq<AddFile> files = LiveFiles.filter(log, txn,
        prune == null ? List.of() : conjuncts(log, txn, prune));
    Dataset<Row> wanted = typedKeys(batchKeys == null ? rows : batchKeys, key, schema);
    boolean hashed = keyHash != null && !files.isEmpty();
    long[] hashesRead = {0};
    Seq<AddFile> read = hashed
        ? mayHold(spark, log, txn, files, wanted, hashOf(schema, keyHash), keyHash, hashesRead)
        : files;
    Dataset<Row> absent = rows;
    if (!read.isEmpty()) {
      Column[] keys = Arrays.stream(key).map(k -> functions.col(quoted(k))).toArray(Column[]::new);
      Dataset<Row> held = log.createDataFrame(txn.snapshot(), read, false, Option.empty())
          .select(keys)
          .join(functions.broadcast(wanted), key, "left_semi");
      absent = rows.join(functions.broadcast(held), key, "left_anti");
    }
    // a generated column the rows lack, Delta computes as it writes them (checks one they carry)
    List<String> given = Arrays.asList(absent.columns());
    Dataset<Row> aligned = absent.select(Arrays.stream(schema.fields())
        .filter(f -> !f.metadata().contains(GENERATION_EXPRESSION) || given.contains(f.name()))
        .map(f -> functions.col(quoted(f.name())).cast(f.dataType()).alias(f.name()))
        .toArray(Column[]::new));
    List<Action> actions = new ArrayList<>(CollectionConverters.asJava(txn.writeFiles(aligned)));
    long inserted = 0;
    for (Action a : actions) {
      if (a instanceof AddFile add && add.numLogicalRecords().isDefined()) {
        inserted += (Long) add.numLogicalRecords().get();
      }
    }
    if (appId != null) {
      actions.add(new SetTransaction(appId, version, Option.apply(System.currentTimeMillis())));
    }
    DeltaOperations.Write operation = new DeltaOperations.Write(SaveMode.Append, Option.empty(),
        Option.empty(), Option.empty(), Option.empty(), Option.empty(), Option.empty(),
        Option.empty(), Option.empty());
    txn.commit(CollectionConverters.asScala(actions).toList(), operation);
    return new long[] {inserted, read.size(), hashesRead[0], hashed ? files.size() : 0};
  }

  /**
   * The version of application transaction {@code appId} that {@code txn}'s snapshot carries,
   * read as {@link OptimisticTransaction#txnVersion} reads it: the id is registered as read, so a
   * concurrent commit carrying it makes this transaction conflict. Delta takes the version from
   * the snapshot's computed state, an aggregate over the table's reconstructed actions (one more
   * Spark job for every fenced write). The snapshot's checksum, the {@code .crc} file its commit
   * wrote, holds the same transactions wherever Delta could keep them there (none has a retention
   * set and there are few enough: Delta's own conditions for writing them), and the version is
   * read there when it does. A version committed without one (delta-rs writes none) falls back.
   */
  private static long txnVersion(OptimisticTransaction txn, String appId) {
    Option<VersionChecksum> crc = txn.snapshot().checksumOpt();
    if (crc.isEmpty() || crc.get().setTransactions().isEmpty()) {
      return txn.txnVersion(appId);
    }
    txn.readTxn().$plus$eq(appId);
    for (SetTransaction t : CollectionConverters.asJava(crc.get().setTransactions().get())) {
      if (t.appId().equals(appId)) {
        return t.version();
      }
    }
    return -1;
  }

  /** The column Delta generates as {@code expression} (null: none, or no expression given). */
  private static String generatedAs(StructType schema, String expression) {
    if (expression == null) {
      return null;
    }
    for (StructField f : schema.fields()) {
      if (f.metadata().contains(GENERATION_EXPRESSION)
          && expression.equals(f.metadata().getString(GENERATION_EXPRESSION))) {
        return f.name();
      }
    }
    return null;
  }

  /**
   * The files among {@code files} whose key hashes ({@code hash}, see {@link #hashOf}) may hold
   * the hash of a key of {@code wanted}; every other file cannot hold a key of the batch. The
   * batch's hashes, sorted in the driver, are merged with each file's sorted hashes from
   * {@link KeyHashes}; the hashes are read only of the files the cache does not hold yet (then
   * kept), and scanned against the batch, as a whole, for those that do not fit it.
   * {@code hashed} receives the number of files whose hashes were read.
   */
  private static Seq<AddFile> mayHold(SparkSession spark, DeltaLog log, OptimisticTransaction txn,
      Seq<AddFile> files, Dataset<Row> wanted, Column hash, String keyHash, long[] hashed) {
    long[] batch = KeyHashes.sortedDistinct(wanted.select(functions.expr(keyHash))
        .as(Encoders.LONG()).collectAsList().stream().mapToLong(Long::longValue).toArray());
    Hashes hashes = hashes(spark, log, txn, files, hash, keyHash);
    List<AddFile> candidates = new ArrayList<>();
    for (Map.Entry<AddFile, LongBuffer> e : hashes.byFile().entrySet()) {
      if (KeyHashes.intersect(e.getValue(), batch)) {
        candidates.add(e.getKey());
      }
    }
    if (!hashes.scan().isEmpty()) {
      candidates.addAll(scanned(log, txn, hashes.scan(), wanted, hash, keyHash));
    }
    hashed[0] = hashes.read() + hashes.scan().size();
    return CollectionConverters.asScala(candidates).toList();
  }

  /**
   * Read into the driver's {@link KeyHashes} the key hashes ({@code keyHash}, as {@link #insert}
   * takes it) of the files of the table at {@code path} that it does not hold yet, as far as they
   * fit; returns how many files were read. A micro-batch calls it while it parses its lines, so
   * that its insert finds the hashes of the files the batch before wrote in the cache already,
   * where it read them after the parse. A read of the latest snapshot, in no transaction: the
   * insert's own transaction still names the files, and reads the hashes of any this did not (a
   * file committed since, or one that did not fit).
   */
  public static long warm(SparkSession spark, String path, String keyHash) {
    return underActive(spark, () -> {
      DeltaLog log = DeltaLog.forTable(spark, path);
      OptimisticTransaction read = log.startTransaction();   // for its snapshot: never committed
      Seq<AddFile> files = LiveFiles.filter(log, read, List.of());
      Column hash = hashOf(read.snapshot().schema(), keyHash);
      return files.isEmpty() ? 0L : hashes(spark, log, read, files, hash, keyHash).read();
    });
  }

  /** Each file's sorted key hashes, by file; the files whose hashes do not fit the cache, to be
   * scanned instead; and how many files' hashes were read into the cache. */
  private record Hashes(Map<AddFile, LongBuffer> byFile, List<AddFile> scan, long read) {}

  /**
   * The sorted key hashes ({@code hash}) of each of {@code files}: from {@link KeyHashes} where it
   * holds them, else read (in jobs of at most {@value #LOAD_CHUNK_ROWS} hashes) and kept there as
   * far as they fit. A file without a row count, or one the cache has no room for, is not read but
   * returned to be scanned against a batch as a whole.
   */
  private static Hashes hashes(SparkSession spark, DeltaLog log, OptimisticTransaction txn,
      Seq<AddFile> files, Column hash, String keyHash) {
    long capacity = cacheCapacity(spark);
    Map<String, AddFile> byEntry = new LinkedHashMap<>();
    for (AddFile f : CollectionConverters.asJava(files)) {
      byEntry.put(entry(log, f, keyHash), f);
    }
    Map<AddFile, LongBuffer> byFile = new HashMap<>();
    List<AddFile> unseen = new ArrayList<>();
    for (Map.Entry<String, AddFile> e : byEntry.entrySet()) {
      LongBuffer known = KeyHashes.get(e.getKey());
      if (known == null) {
        unseen.add(e.getValue());
      } else {
        byFile.put(e.getValue(), known);
      }
    }
    long unseenRows = 0;
    for (AddFile f : unseen) {
      unseenRows += Math.max(0, rows(f));
    }
    long room = KeyHashes.makeRoom(unseenRows, capacity, byEntry.keySet());
    List<List<AddFile>> loads = new ArrayList<>();
    List<AddFile> scan = new ArrayList<>();
    long chunk = LOAD_CHUNK_ROWS;
    for (AddFile f : unseen) {
      long rows = rows(f);
      if (rows < 0 || rows > room) {   // no row count, or no room: scanned, not kept
        scan.add(f);
        continue;
      }
      room -= rows;
      if (loads.isEmpty() || chunk + rows > LOAD_CHUNK_ROWS) {
        loads.add(new ArrayList<>());
        chunk = 0;
      }
      loads.get(loads.size() - 1).add(f);
      chunk += rows;
    }
    for (List<AddFile> load : loads) {
      for (Map.Entry<AddFile, LongBuffer> e : load(log, txn, load, hash).entrySet()) {
        // kept by reference: the cache may drop the entry again (another caller making room)
        KeyHashes.put(entry(log, e.getKey(), keyHash), e.getValue(), capacity);
        byFile.put(e.getKey(), e.getValue());
      }
    }
    return new Hashes(byFile, scan, unseen.size() - scan.size());
  }

  /** A file's rows as its statistics count them, its deletion vector applied (-1: no count). */
  private static long rows(AddFile f) {
    return f.numLogicalRecords().isDefined() ? (Long) f.numLogicalRecords().get() : -1;
  }

  /** The cache's capacity in hashes: {@value #CACHE_BYTES} of the session, or an eighth of the
   * driver's heap. */
  private static long cacheCapacity(SparkSession spark) {
    return LiveFiles.bytesSetting(spark, CACHE_BYTES, 8) / Long.BYTES;
  }

  /** A file's name in the cache: its name in the table's state ({@link LiveFiles#name}: its path
   * and its deletion vector, which only ever removes rows but which a restore can take away
   * again), and the key's hash expression (a table may be looked up by more than one key). */
  private static String entry(DeltaLog log, AddFile f, String keyHash) {
    return LiveFiles.name(log, f) + "#" + keyHash;
  }

  /** The sorted key hashes ({@code hash}) of each of {@code files}, read in one job. */
  private static Map<AddFile, LongBuffer> load(DeltaLog log, OptimisticTransaction txn,
      List<AddFile> files, Column hash) {
    Map<URI, AddFile> byPath = new HashMap<>();
    for (AddFile f : files) {
      byPath.put(f.absolutePath(log).toUri(), f);
    }
    Map<AddFile, LongBuffer> hashes = new HashMap<>();
    for (Map.Entry<String, LongBuffer> e : KeyHashes.byFile(log.createDataFrame(txn.snapshot(),
            CollectionConverters.asScala(files).toList(), false, Option.empty())
        .select(functions.col("_metadata.file_path"), hash)).entrySet()) {
      AddFile f = byPath.remove(new Path(URI.create(e.getKey())).toUri());
      if (f == null) {   // a file the read named but the snapshot does not: never guess
        throw new IllegalStateException(log.dataPath() + ": key hashes read from a file the "
            + "snapshot does not list: " + e.getKey());
      }
      hashes.put(f, e.getValue());
    }
    for (AddFile f : byPath.values()) {   // no row read: the file must hold none
      if (rows(f) != 0) {
        throw new IllegalStateException(log.dataPath() + ": no key hash read from " + f.path()
            + ", whose statistics count rows");
      }
      hashes.put(f, LongBuffer.allocate(0));
    }
    return hashes;
  }

  /**
   * The files among {@code files} whose key hashes ({@code hash}) hold the hash of a key of
   * {@code wanted}: one scan of their hashes, the batch's hashes broadcast against it.
   */
  private static List<AddFile> scanned(DeltaLog log, OptimisticTransaction txn, List<AddFile> files,
      Dataset<Row> wanted, Column stored, String keyHash) {
    Dataset<Row> hashes = functions.broadcast(
        wanted.select(functions.expr(keyHash).alias("_weir_hash")).distinct());
    Set<URI> found = new HashSet<>();
    for (Row r : log.createDataFrame(txn.snapshot(), CollectionConverters.asScala(files).toList(),
            false, Option.empty())
        .select(stored, functions.col("_metadata.file_path").alias("_weir_file"))
        .join(hashes, stored.equalTo(functions.col("_weir_hash")), "left_semi")
        .select("_weir_file").distinct().collectAsList()) {
      found.add(new Path(URI.create(r.getString(0))).toUri());
    }
    List<AddFile> candidates = new ArrayList<>();
    for (AddFile f : files) {
      if (found.remove(f.absolutePath(log).toUri())) {
        candidates.add(f);
      }
    }
    if (!found.isEmpty()) {   // a file the scan read but the snapshot does not name: never skip it
      throw new IllegalStateException(log.dataPath() + ": key hashes found in files the snapshot "
          + "does not list: " + found);
    }
    return candidates;
  }

  /**
   * {@code prune}, resolved against the columns of the transaction's snapshot (a frame of no
   * files: only its schema is needed) and optimized as a query's filter is before files are
   * skipped by it, split at its top-level ANDs. File skipping ({@link LiveFiles}, as Delta's own)
   * knows plain comparisons of a column with a literal: the analyzed {@code position BETWEEN 10
   * AND 14} (a long against int literals) still holds the BETWEEN and the literals' casts, which
   * it cannot use, and every file of the source was read (a Kafka partition's whole history,
   * batch after batch). The optimizer rewrites both away, as it does for a query. A condition it
   * folds away entirely (always true, or a relation it proves empty) leaves no conjunct: every
   * file is read, never too few.
   */
  private static List<Expression> conjuncts(DeltaLog log, OptimisticTransaction txn, String prune) {
    Seq<AddFile> none = CollectionConverters.asScala(List.<AddFile>of()).toList();
    org.apache.spark.sql.classic.Dataset<Row> pruned = (org.apache.spark.sql.classic.Dataset<Row>)
        log.createDataFrame(txn.snapshot(), none, false, Option.empty()).alias("t").where(prune);
    Filter filter = firstFilter(pruned.queryExecution().optimizedPlan());
    List<Expression> parts = new ArrayList<>();
    if (filter != null) {
      split(filter.condition(), parts);
    }
    return parts;
  }

  private static Filter firstFilter(LogicalPlan plan) {
    if (plan instanceof Filter filter) {
      return filter;
    }
    for (LogicalPlan child : CollectionConverters.asJava(plan.children())) {
      Filter found = firstFilter(child);
      if (found != null) {
        return found;
      }
    }
    return null;
  }

  private static void split(Expression e, List<Expression> parts) {
    if (e instanceof And and) {
      split(and.left(), parts);
      split(and.right(), parts);
    } else {
      parts.add(e);
    }
  }

  static String quoted(String name) {
    return "`" + name.replace("`", "``") + "`";
  }
}
