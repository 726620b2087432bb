package weir;

import java.nio.ByteBuffer;
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
 * <p>Bounded: the cache holds at most {@code capacity} hashes (8 bytes each); past it the least
 * recently used entries not in use go, and a file that does not fit is not cached at all (the
 * caller scans its hashes, as for a cold cache). Shared by every table of the JVM, and
 * thread-safe: the stream's write threads and a back-fill in the same driver use it at once.
 */
final class KeyHashes {
  /** By entry name, in access order: the first is the least recently used. */
  private static final LinkedHashMap<String, long[]> ENTRIES = new LinkedHashMap<>(64, 0.75f, true);
  private static long held;

  private KeyHashes() {}

  /** The sorted hashes of an entry, or null when the cache does not hold it. */
  static synchronized long[] get(String entry) {
    return ENTRIES.get(entry);
  }

  /**
   * Room for {@code wanted} more hashes within {@code capacity}, made by dropping the least
   * recently used entries not named in {@code inUse}: the number of hashes that now fit (at most
   * {@code wanted}).
   */
  static synchronized long makeRoom(long wanted, long capacity, Set<String> inUse) {
    Iterator<Map.Entry<String, long[]>> oldest = ENTRIES.entrySet().iterator();
    while (held + wanted > capacity && oldest.hasNext()) {
      Map.Entry<String, long[]> e = oldest.next();
      if (!inUse.contains(e.getKey())) {
        held -= e.getValue().length;
        oldest.remove();
      }
    }
    return Math.max(0, Math.min(wanted, capacity - held));
  }

  /** Keep an entry's hashes, sorted; an entry that no longer fits is left out. */
  static synchronized void put(String entry, long[] sorted, long capacity) {
    long[] before = ENTRIES.get(entry);
    long after = held - (before == null ? 0 : before.length) + sorted.length;
    if (after <= capacity) {
      ENTRIES.put(entry, sorted);
      held = after;
    }
  }

  /** The hashes held, for tests and logs. */
  static synchronized long held() {
    return held;
  }

  /** The values sorted, each once (sorts {@code values} in place). */
  static long[] sortedDistinct(long[] values) {
    long[] sorted = values;
    Arrays.sort(sorted);
    int n = 0;
    for (int i = 0; i < sorted.length; i++) {
      if (n == 0 || sorted[i] != sorted[n - 1]) {
        sorted[n++] = sorted[i];
      }
    }
    return Arrays.copyOf(sorted, n);
  }

  /** Whether two sorted arrays share a value: one merge pass, galloping past runs of either. */
  static boolean intersect(long[] a, long[] b) {
    int i = 0;
    int j = 0;
    while (i < a.length && j < b.length) {
      if (a[i] == b[j]) {
        return true;
      } else if (a[i] < b[j]) {
        i = gallop(a, i, b[j]);
      } else {
        j = gallop(b, j, a[i]);
      }
    }
    return false;
  }

  /** The first index at or after {@code from} whose value is at least {@code target}. */
  private static int gallop(long[] sorted, int from, long target) {
    int step = 1;
    int low = from;
    int high = from + 1;
    while (high < sorted.length && sorted[high] < target) {
      low = high;
      step <<= 1;
      high = from + step;
    }
    high = Math.min(high, sorted.length);
    while (low < high) {   // sorted[low] < target (or low == from), sorted[high] >= target
      int mid = (low + high) >>> 1;
      if (sorted[mid] < target) {
        low = mid + 1;
      } else {
        high = mid;
      }
    }
    return low;
  }

  /**
   * The sorted hashes of each file of {@code fileAndHash} (rows of a file's path and a hash), by
   * path: each task sorts its files' hashes into an array and sends it as bytes, where a
   * {@code collect_list} boxed every hash; a file that two tasks read is merged here.
   */
  static Map<String, long[]> byFile(Dataset<Row> fileAndHash) {
    Map<String, long[]> files = new HashMap<>();
    Set<String> split = new java.util.HashSet<>();
    for (Tuple2<String, byte[]> part : fileAndHash.mapPartitions(new PerFile(),
        Encoders.tuple(Encoders.STRING(), Encoders.BINARY())).collectAsList()) {
      long[] hashes = new long[part._2().length / Long.BYTES];
      ByteBuffer.wrap(part._2()).asLongBuffer().get(hashes);
      long[] before = files.put(part._1(), hashes);
      if (before != null) {
        long[] both = Arrays.copyOf(before, before.length + hashes.length);
        System.arraycopy(hashes, 0, both, before.length, hashes.length);
        files.put(part._1(), both);
        split.add(part._1());
      }
    }
    for (String file : split) {
      Arrays.sort(files.get(file));
    }
    return files;
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
