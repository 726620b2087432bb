package weir;

import java.net.URI;
import java.net.URISyntaxException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.hadoop.fs.Path;
import org.apache.spark.sql.Column;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.delta.DeltaLog;
import org.apache.spark.sql.delta.Snapshot;
import org.apache.spark.sql.delta.actions.AddFile;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.types.BinaryType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.types.TimestampType;
import org.rocksdb.BlockBasedTableConfig;
import org.rocksdb.BloomFilter;
import org.rocksdb.LRUCache;
import org.rocksdb.Options;
import org.rocksdb.RocksDB;
import org.rocksdb.RocksDBException;
import org.rocksdb.RocksIterator;
import org.rocksdb.WriteBatch;
import org.rocksdb.WriteOptions;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import scala.Option;
import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;

/**
 * An exact index of the keys of one Delta table: key → the data file that holds it, in RocksDB
 * on the driver's disk, beside the table and never inside it. A micro-batch's dedupe then costs
 * its own keys (point lookups) and the files committed since the last batch, not a read of every
 * key the table holds.
 *
 * <p>Exact by reconciliation, not by coordination. No writer of the table knows the index: each
 * use first makes it describe the live files of the very snapshot the caller's transaction read.
 * A live file the index has not registered (the last batch's, a back-fill's rewrite, a compaction,
 * a file a restore brought back) has its keys read; a registered file that is no longer live is
 * unregistered. A key is held when its entry names a registered live file. Files are immutable
 * and identified by path and deletion vector, so an entry can only name a file that holds the key;
 * a key whose file was removed names a dead file and reads as absent.
 *
 * <p>Crash-safe by the order of its writes: a dead file is unregistered and the ids of the files to
 * read are reserved (never reused) before any key entry is written; a file is registered only once
 * all its keys are written. Kill it anywhere and the next use reads again what was not registered.
 * A key entry is overwritten only when another file holding it is read, and then every file that
 * was not live at that moment is already unregistered: so a registered live file's keys name it.
 * That holds while the table's live files hold each key once (Weir's writers keep silver so; a
 * doubled key, which only damage makes, can read as absent: inserted again, never lost).
 *
 * <p>The index belongs to one table (its Delta id) and one key: another table at the same path,
 * or another key, starts it afresh. It stays open in the process that opened it, so RocksDB's
 * compactions run between batches, until {@link #closeAll}; one process holds it at a time
 * (RocksDB's lock), and the caller reads the table's keys instead when {@link #acquire} returns
 * null (a driver that lost its lease and still runs holds it).
 */
public final class KeyIndex {
  private static final Logger LOG = LoggerFactory.getLogger(KeyIndex.class);
  private static final byte KEY = 'k';
  private static final byte FILE = 'f';
  private static final byte[] IDENTITY = "m:identity".getBytes(StandardCharsets.UTF_8);
  private static final byte[] NEXT_ID = "m:next".getBytes(StandardCharsets.UTF_8);
  private static final int CHUNK = 50_000;
  private static final long GROUP_ROWS = 1_000_000;

  static {
    RocksDB.loadLibrary();
    // an index left open at the JVM's exit is closed before RocksDB's own teardown runs
    Runtime.getRuntime().addShutdownHook(new Thread(KeyIndex::closeAll, "weir-key-index-close"));
  }

  private static final Map<String, KeyIndex> OPEN = new HashMap<>();

  private final Options options;
  private final LRUCache cache;
  private final RocksDB db;
  private StructType schema;
  private String[] key;
  private final Set<Long> live = new HashSet<>();

  private KeyIndex(Options options, LRUCache cache, RocksDB db, StructType schema, String[] key) {
    this.options = options;
    this.cache = cache;
    this.db = db;
    this.schema = schema;
    this.key = key;
  }

  /**
   * The index at {@code dir} for the table {@code snapshot} belongs to, by {@code key}, opened
   * once per process and emptied first when it was built for another table or key. Null when
   * another process holds it. Its user holds its monitor while it reconciles and looks up.
   */
  public static synchronized KeyIndex acquire(String dir, Snapshot snapshot, String[] key)
      throws RocksDBException {
    KeyIndex index = OPEN.get(dir);
    if (index == null) {
      index = open(dir, snapshot.schema(), key);
      if (index == null) {
        return null;
      }
      OPEN.put(dir, index);
    }
    index.belongTo(snapshot, key);
    return index;
  }

  /** Close every index this process holds (a driver's end). */
  public static synchronized void closeAll() {
    for (KeyIndex index : OPEN.values()) {
      synchronized (index) {
        index.db.close();
        index.options.close();
        index.cache.close();
      }
    }
    OPEN.clear();
  }

  private static KeyIndex open(String dir, StructType schema, String[] key) throws RocksDBException {
    new java.io.File(dir).mkdirs();
    LRUCache cache = new LRUCache(64L << 20);
    Options options = new Options().setCreateIfMissing(true)
        .setTableFormatConfig(new BlockBasedTableConfig().setBlockCache(cache)
            .setFilterPolicy(new BloomFilter(10, false)).setCacheIndexAndFilterBlocks(true));
    try {
      return new KeyIndex(options, cache, RocksDB.open(options, dir), schema, key);
    } catch (RocksDBException e) {
      options.close();
      cache.close();
      if (e.getMessage() != null && e.getMessage().contains("lock")) {
        LOG.warn("key index {} is held by another process ({}): the table's keys are read instead",
            dir, e.getMessage());
        return null;
      }
      throw e;
    }
  }

  /** Empty the index unless it was built for this table and key (then only note them). */
  private synchronized void belongTo(Snapshot snapshot, String[] key) throws RocksDBException {
    schema = snapshot.schema();
    this.key = key;
    StringBuilder spec = new StringBuilder(snapshot.metadata().id());
    for (String k : key) {
      spec.append('|').append(k).append(' ').append(schema.apply(k).dataType().simpleString());
    }
    byte[] identity = spec.toString().getBytes(StandardCharsets.UTF_8);
    byte[] held = db.get(IDENTITY);
    if (held != null && Arrays.equals(held, identity)) {
      return;
    }
    if (held != null) {
      LOG.warn("key index was built for another table or key: built afresh");
      try (RocksIterator it = db.newIterator(); WriteBatch all = new WriteBatch();
           WriteOptions write = new WriteOptions()) {
        for (it.seekToFirst(); it.isValid(); it.next()) {
          all.delete(it.key());
        }
        db.write(write, all);
      }
    }
    db.put(IDENTITY, identity);
  }

  /**
   * A key of this index's table as one string: the key columns, typed as the table types them,
   * in a JSON array (unambiguous, nulls included; a timestamp as its microseconds since the
   * epoch, whatever the session's time zone).
   */
  public Column encoded() {
    Column[] parts = new Column[key.length];
    for (int i = 0; i < key.length; i++) {
      DataType type = schema.apply(key[i]).dataType();
      Column typed = functions.col(quoted(key[i])).cast(type);
      parts[i] = type instanceof TimestampType ? functions.unix_micros(typed).cast("string")
          : type instanceof BinaryType ? functions.base64(typed) : typed.cast("string");
    }
    return functions.to_json(functions.array(parts));
  }

  /**
   * Make the index describe {@code files}, the live files of {@code snapshot} (see the class
   * comment for the order of the writes). Returns how many files had their keys read.
   */
  public long reconcile(DeltaLog log, Snapshot snapshot, Seq<AddFile> files) throws RocksDBException {
    Map<String, AddFile> current = new HashMap<>();
    for (AddFile add : CollectionConverters.asJava(files)) {
      current.put(identity(add), add);
    }
    Map<String, Long> registered = registered();
    List<AddFile> missing = new ArrayList<>();
    live.clear();
    try (WriteBatch first = new WriteBatch(); WriteOptions write = new WriteOptions()) {
      for (Map.Entry<String, Long> e : registered.entrySet()) {
        if (current.containsKey(e.getKey())) {
          live.add(e.getValue());
        } else {
          first.delete(prefixed(FILE, e.getKey()));
        }
      }
      for (Map.Entry<String, AddFile> e : current.entrySet()) {
        if (!registered.containsKey(e.getKey())) {
          missing.add(e.getValue());
        }
      }
      byte[] next = db.get(NEXT_ID);
      long firstId = next == null ? 1 : ByteBuffer.wrap(next).getLong();
      first.put(NEXT_ID, longBytes(firstId + missing.size()));
      db.write(write, first);
      if (missing.isEmpty()) {
        return 0;
      }
      Map<String, Long> ids = new HashMap<>();
      Map<String, byte[]> byPath = new HashMap<>();
      for (int i = 0; i < missing.size(); i++) {
        AddFile add = missing.get(i);
        byte[] id = longBytes(firstId + i);
        ids.put(identity(add), firstId + i);
        byPath.put(new Path(log.dataPath(), new Path(uri(add.path()))).toUri().getPath(), id);
      }
      Map<String, byte[]> byFilePath = new HashMap<>();   // as `_metadata.file_path` spells it
      WriteBatch chunk = new WriteBatch();
      try {
        for (List<AddFile> group : groups(missing)) {
          List<Row> rows = log.createDataFrame(snapshot, CollectionConverters.asScala(group).toList(),
                  false, Option.empty())
              .select(encoded().alias("k"), functions.col("_metadata.file_path").alias("f"))
              .collectAsList();
          for (Row row : rows) {
            byte[] id = byFilePath.computeIfAbsent(row.getString(1), f -> byPath.get(normalised(f)));
            if (id == null) {
              throw new IllegalStateException("key index: a row of " + row.getString(1)
                  + " that is none of the files read (" + byPath.keySet() + ")");
            }
            chunk.put(prefixed(KEY, row.getString(0)), id);
            if (chunk.count() >= CHUNK) {
              db.write(write, chunk);
              chunk.close();
              chunk = new WriteBatch();
            }
          }
        }
        for (Map.Entry<String, Long> e : ids.entrySet()) {
          chunk.put(prefixed(FILE, e.getKey()), longBytes(e.getValue()));
        }
        db.write(write, chunk);
      } finally {
        chunk.close();
      }
      live.addAll(ids.values());
    }
    return missing.size();
  }

  /**
   * The keys of {@code encodedKeys} (as {@link #encoded} gives them) that a live file holds. They
   * are collected: the caller bounds them (one micro-batch).
   */
  public List<String> held(Dataset<String> encodedKeys) throws RocksDBException {
    List<String> keys = encodedKeys.collectAsList();
    List<String> held = new ArrayList<>();
    for (int from = 0; from < keys.size(); from += CHUNK) {
      List<String> chunk = keys.subList(from, Math.min(keys.size(), from + CHUNK));
      List<byte[]> lookups = new ArrayList<>(chunk.size());
      for (String k : chunk) {
        lookups.add(prefixed(KEY, k));
      }
      List<byte[]> found = db.multiGetAsList(lookups);
      for (int i = 0; i < chunk.size(); i++) {
        byte[] id = found.get(i);
        if (id != null && live.contains(ByteBuffer.wrap(id).getLong())) {
          held.add(chunk.get(i));
        }
      }
    }
    return held;
  }

  /** {@code files} in groups of at most {@link #GROUP_ROWS} rows (a file of more alone): each
   * group's keys are read by one Spark job and held on the heap at once. */
  private static List<List<AddFile>> groups(List<AddFile> files) {
    List<List<AddFile>> groups = new ArrayList<>();
    List<AddFile> group = new ArrayList<>();
    long rows = 0;
    for (AddFile add : files) {
      long n = add.numLogicalRecords().isDefined() ? (Long) add.numLogicalRecords().get()
          : add.size() / 16;   // no statistics: a guess at a row per 16 bytes
      if (!group.isEmpty() && rows + n > GROUP_ROWS) {
        groups.add(group);
        group = new ArrayList<>();
        rows = 0;
      }
      group.add(add);
      rows += n;
    }
    if (!group.isEmpty()) {
      groups.add(group);
    }
    return groups;
  }

  /** Registered files: identity → id. */
  private Map<String, Long> registered() {
    Map<String, Long> out = new HashMap<>();
    try (RocksIterator it = db.newIterator()) {
      byte[] start = {FILE};
      for (it.seek(start); it.isValid() && it.key().length > 0 && it.key()[0] == FILE; it.next()) {
        out.put(new String(it.key(), 1, it.key().length - 1, StandardCharsets.UTF_8),
            ByteBuffer.wrap(it.value()).getLong());
      }
    }
    return out;
  }

  private static String identity(AddFile add) {
    return add.deletionVector() == null ? add.path()
        : add.path() + "#" + add.deletionVector().uniqueId();
  }

  private static URI uri(String path) {
    try {
      return new URI(path);
    } catch (URISyntaxException e) {
      throw new IllegalArgumentException(path, e);
    }
  }

  /** A `_metadata.file_path` (a URI, escaped) as the plain path of its file. */
  private static String normalised(String filePath) {
    try {
      return new Path(new URI(filePath)).toUri().getPath();
    } catch (URISyntaxException e) {
      return new Path(filePath).toUri().getPath();
    }
  }

  private static byte[] prefixed(byte prefix, String text) {
    byte[] bytes = text.getBytes(StandardCharsets.UTF_8);
    byte[] out = new byte[bytes.length + 1];
    out[0] = prefix;
    System.arraycopy(bytes, 0, out, 1, bytes.length);
    return out;
  }

  private static byte[] longBytes(long value) {
    return ByteBuffer.allocate(Long.BYTES).putLong(value).array();
  }

  private static String quoted(String name) {
    return "`" + name.replace("`", "``") + "`";
  }
}
