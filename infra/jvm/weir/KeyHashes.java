package weir;

import java.nio.ByteBuffer;
import java.nio.LongBuffer;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.spark.api.java.function.MapPartitionsFunction;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import scala.Tuple2;

/**
 * The key hashes of Delta data files, each file's sorted, kept in the driver between batches: a
 * batch then reads the hash column only of the files it has not seen (the ones the batch before
 * wrote, or a compaction), and finds the files that may hold its keys by merging sorted arrays in
 * memory, where it scanned the hash column of every file per batch (a cost linear in the table).
 *
 * <p>Exact because a Delta data file never changes: a file is named once and never rewritten. Its
 * rows can only lose rows to a deletion vector, which a later version adds or a restore takes away,
 * so an entry is named by the file <em>and</em> its deletion vector: a file with another vector is
 * another entry. An entry's hashes are those of the file's rows as read (its vector applied).
 *
 * <p>Bounded, and off the heap: the cache holds at most {@code capacity} hashes (8 bytes each), in
 * direct buffers. On the heap, 86 MB of hashes (10.7 M silver rows) in a 1 GB driver pushed a
 * backlog's large batch into long collections: 13-20 s of a 26-34 s batch, against 2-3 s without
 * them (docs/performance.md). Past the capacity the least recently used entries not in use go, and
 * a file that does not fit is not cached at all (the caller scans its hashes, as for a cold
 * cache). Shared by every table of the JVM, and thread-safe: any caller's thread may use it.
 */
final class KeyHashes {
  /** By entry name, in access order: the first is the least recently used. */
  private static final LinkedHashMap<String, LongBuffer> ENTRIES =
      new LinkedHashMap<>(64, 0.75f, true);
  private static long held;

  private KeyHashes() {}

  /** The sorted hashes of an entry (a read-only view), or null when the cache does not hold it. */
  static synchronized LongBuffer get(String entry) {
    LongBuffer hashes = ENTRIES.get(entry);
    return hashes == null ? null : hashes.asReadOnlyBuffer();
  }

  /**
   * Room for {@code wanted} more hashes within {@code capacity}, made by dropping the least
   * recently used entries not named in {@code inUse}: the number of hashes that now fit (at most
   * {@code wanted}).
   */
  static synchronized long makeRoom(long wanted, long capacity, Set<String> inUse) {
    Iterator<Map.Entry<String, LongBuffer>> oldest = ENTRIES.entrySet().iterator();
    while (held + wanted > capacity && oldest.hasNext()) {
      Map.Entry<String, LongBuffer> e = oldest.next();
      if (!inUse.contains(e.getKey())) {
        held -= e.getValue().capacity();
        oldest.remove();
      }
    }
    return Math.max(0, Math.min(wanted, capacity - held));
  }

  /** Keep an entry's hashes, sorted; an entry that no longer fits is left out. */
  static synchronized void put(String entry, LongBuffer sorted, long capacity) {
    LongBuffer before = ENTRIES.get(entry);
    long after = held - (before == null ? 0 : before.capacity()) + sorted.capacity();
    if (after <= capacity) {
      ENTRIES.put(entry, sorted);
      held = after;
    }
  }

  /** The values sorted, each once (sorts {@code values} in place). */
  static long[] sortedDistinct(long[] values) {
    Arrays.sort(values);
    int n = 0;
    for (int i = 0; i < values.length; i++) {
      if (n == 0 || values[i] != values[n - 1]) {
        values[n++] = values[i];
      }
    }
    return Arrays.copyOf(values, n);
  }

  /** Whether a file's sorted hashes and a batch's share a value: one merge pass, galloping past
   * the file's runs below the batch's next hash (a batch is far smaller than a file). */
  static boolean intersect(LongBuffer file, long[] batch) {
    int i = 0;
    int n = file.limit();
    for (long wanted : batch) {
      i = gallop(file, i, n, wanted);
      if (i == n) {
        return false;
      }
      if (file.get(i) == wanted) {
        return true;
      }
    }
    return false;
  }

  /** The first index in [from, n) whose value is at least {@code target}, or n. */
  private static int gallop(LongBuffer sorted, int from, int n, long target) {
    if (from >= n || sorted.get(from) >= target) {
      return from;
    }
    int low = from;    // sorted[low] < target
    int step = 1;
    int high = from + 1;
    while (high < n && sorted.get(high) < target) {
      low = high;
      step <<= 1;
      high = from + step;
    }
    high = Math.min(high, n);
    while (low + 1 < high) {   // sorted[low] < target; sorted[high] >= target, or high == n
      int mid = (low + high) >>> 1;
      if (sorted.get(mid) < target) {
        low = mid;
      } else {
        high = mid;
      }
    }
    return high;
  }

  /**
   * The sorted hashes of each file of {@code fileAndHash} (rows of a file's path and a hash), by
   * path, each in a direct buffer: each task sorts its files' hashes into an array and sends it as
   * bytes, where a {@code collect_list} boxed every hash; a file that two tasks read is merged here.
   */
  static Map<String, LongBuffer> byFile(Dataset<Row> fileAndHash) {
    Map<String, List<byte[]>> parts = new HashMap<>();
    for (Tuple2<String, byte[]> part : fileAndHash.mapPartitions(new PerFile(),
        Encoders.tuple(Encoders.STRING(), Encoders.BINARY())).collectAsList()) {
      parts.computeIfAbsent(part._1(), f -> new ArrayList<>(1)).add(part._2());
    }
    Map<String, LongBuffer> files = new HashMap<>();
    for (Map.Entry<String, List<byte[]>> e : parts.entrySet()) {
      List<byte[]> sortedParts = e.getValue();
      byte[] sorted = sortedParts.get(0);
      if (sortedParts.size() > 1) {   // read by two tasks: merged and sorted again
        long[] all = sortedParts.stream()
            .flatMapToLong(b -> Arrays.stream(longs(b))).sorted().toArray();
        ByteBuffer bytes = ByteBuffer.allocate(all.length * Long.BYTES);
        bytes.asLongBuffer().put(all);
        sorted = bytes.array();
      }
      files.put(e.getKey(), ByteBuffer.allocateDirect(sorted.length).put(sorted).flip().asLongBuffer());
    }
    return files;
  }

  private static long[] longs(byte[] bytes) {
    long[] values = new long[bytes.length / Long.BYTES];
    ByteBuffer.wrap(bytes).asLongBuffer().get(values);
    return values;
  }

  /** One task's files and their sorted hashes, as bytes. */
  private static final class PerFile implements MapPartitionsFunction<Row, Tuple2<String, byte[]>> {
    private static final long serialVersionUID = 1L;

    @Override
    public Iterator<Tuple2<String, byte[]>> call(Iterator<Row> rows) {
      Map<String, long[]> hashes = new LinkedHashMap<>();
      Map<String, Integer> counts = new HashMap<>();
      while (rows.hasNext()) {
        Row r = rows.next();
        String file = r.getString(0);
        long[] held = hashes.computeIfAbsent(file, f -> new long[1024]);
        int n = counts.merge(file, 1, Integer::sum);
        if (n > held.length) {
          held = Arrays.copyOf(held, held.length * 2);
          hashes.put(file, held);
        }
        held[n - 1] = r.getLong(1);
      }
      List<Tuple2<String, byte[]>> out = new ArrayList<>(hashes.size());
      for (Map.Entry<String, long[]> e : hashes.entrySet()) {
        long[] sorted = Arrays.copyOf(e.getValue(), counts.get(e.getKey()));
        Arrays.sort(sorted);
        ByteBuffer bytes = ByteBuffer.allocate(sorted.length * Long.BYTES);
        bytes.asLongBuffer().put(sorted);
        out.add(new Tuple2<>(e.getKey(), bytes.array()));
      }
      return out.iterator();
    }
  }
}
