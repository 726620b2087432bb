package weir;

import java.net.URI;
import java.net.URISyntaxException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Iterator;
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
import org.rocksdb.FlushOptions;
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
 * or another key, starts it afresh. One process opens it at a time (RocksDB's lock): the caller
 * falls back to reading the table's keys when {@link #tryOpen} returns null.
 */
public final class KeyIndex implements AutoCloseable {
  private static final Logger LOG = LoggerFactory.getLogger(KeyIndex.class);
  private static final byte KEY = 'k';
  private static final byte FILE = 'f';
  private static final byte[] IDENTITY = "m:identity".getBytes(StandardCharsets.UTF_8);
  private static final byte[] NEXT_ID = "m:next".getBytes(StandardCharsets.UTF_8);
  private static final int CHUNK = 50_000;

  static {
    RocksDB.loadLibrary();
  }

  private final Options options;
  private final LRUCache cache;
  private final RocksDB db;
  private final StructType schema;
  private final String[] key;
  private final Set<Long> live = new HashSet<>();

  private KeyIndex(Options options, LRUCache cache, RocksDB db, StructType schema, String[] key) {
    this.options = options;
    this.cache = cache;
    this.db = db;
    this.schema = schema;
    this.key = key;
  }

  /**
   * The index at {@code dir} of the table {@code snapshot} belongs to, by {@code key}; emptied
   * first when it was built for another table or key. Null when another process holds it.
   */
  public static KeyIndex tryOpen(String dir, Snapshot snapshot, String[] key) throws RocksDBException {
    new java.io.File(dir).mkdirs();
    LRUCache cache = new LRUCache(64L << 20);
    Options options = new Options().setCreateIfMissing(true)
        .setTableFormatConfig(new BlockBasedTableConfig().setBlockCache(cache)
            .setFilterPolicy(new BloomFilter(10, false)).setCacheIndexAndFilterBlocks(true));
    RocksDB db;
    try {
      db = RocksDB.open(options, dir);
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
    KeyIndex index = new KeyIndex(options, cache, db, snapshot.schema(), key);
    StringBuilder spec = new StringBuilder(snapshot.metadata().id());
    for (String k : key) {
      spec.append('|').append(k).append(' ').append(index.schema.apply(k).dataType().simpleString());
    }
    byte[] identity = spec.toString().getBytes(StandardCharsets.UTF_8);
    byte[] held = db.get(IDENTITY);
    if (held != null && !Arrays.equals(held, identity)) {
      LOG.warn("key index {} was built for another table or key: built afresh", dir);
      try (RocksIterator it = db.newIterator(); WriteBatch all = new WriteBatch();
           WriteOptions write = new WriteOptions()) {
        for (it.seekToFirst(); it.isValid(); it.next()) {
          all.delete(it.key());
        }
        db.write(write, all);
      }
      held = null;
    }
    if (held == null) {
      db.put(IDENTITY, identity);
    }
    return index;
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
      Dataset<Row> keys = log.createDataFrame(snapshot,
              CollectionConverters.asScala(missing).toList(), false, Option.empty())
          .select(encoded().alias("k"), functions.col("_metadata.file_path").alias("f"));
      WriteBatch chunk = new WriteBatch();
      try {
        Iterator<Row> rows = keys.toLocalIterator();
        while (rows.hasNext()) {
          Row row = rows.next();
          byte[] id = byPath.get(normalised(row.getString(1)));
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

  /** The keys of {@code encodedKeys} (as {@link #encoded} gives them) that a live file holds. */
  public List<String> held(Dataset<String> encodedKeys) throws RocksDBException {
    List<String> held = new ArrayList<>();
    List<String> chunk = new ArrayList<>(CHUNK);
    Iterator<String> keys = encodedKeys.toLocalIterator();
    while (keys.hasNext()) {
      chunk.add(keys.next());
      if (chunk.size() == CHUNK || !keys.hasNext()) {
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
        chunk.clear();
      }
    }
    return held;
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

  /** Flushed, so the next open replays no log. */
  @Override
  public void close() throws RocksDBException {
    try (FlushOptions flush = new FlushOptions().setWaitForFlush(true)) {
      db.flush(flush);
    } finally {
      db.close();
      options.close();
      cache.close();
    }
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
