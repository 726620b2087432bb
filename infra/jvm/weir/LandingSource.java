package weir;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.io.Serializable;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.BasicFileAttributes;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.EnumSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import org.apache.spark.sql.RuntimeConfig;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.read.streaming.Offset;
import org.apache.spark.sql.connector.read.streaming.ReadAllAvailable;
import org.apache.spark.sql.connector.read.streaming.ReadLimit;
import org.apache.spark.sql.connector.read.streaming.ReadMaxBytes;
import org.apache.spark.sql.connector.read.streaming.SupportsAdmissionControl;
import org.apache.spark.sql.connector.read.streaming.SupportsTriggerAvailableNow;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import org.apache.spark.unsafe.types.UTF8String;
import scala.Option;

/**
 * Weir's landing source: the lines of a landing folder's files, read in the JVM in bounded
 * micro-batches. {@code spark_jobs.landing} plans (the manifest, offsets, admission control and
 * the byte ranges of each task, through a {@link LandingPlanner} registered here); this class
 * reads the ranges.
 *
 * <p>Lines follow Hadoop's {@code LineRecordReader} convention, so a line's identity does not
 * depend on where batch or task boundaries fall: the range {@code [a, b)} owns exactly the lines
 * whose first byte lies in {@code [a, b)}; it skips the partial line it starts in and reads past
 * {@code b} to finish its last line. Each row is {@code (source, position, value, raw, line_bytes)}:
 * the file's URI and digest, the byte offset of the line's first byte, the line without its
 * {@code \n}, a trailing {@code \r} or a UTF-8 byte-order mark, decoded with U+FFFD in place of
 * bytes that are not UTF-8, its bytes only when they are not, and its length only when it is
 * longer than the {@code maxLineBytes} option.
 *
 * <p>A task's memory is bounded by its range and {@code maxLineBytes}, whatever a file holds: of
 * a longer line (a file without line breaks, a binary dropped by mistake) the reader keeps the
 * first {@code maxLineBytes} bytes, cut back to a UTF-8 character's start, and reads the rest
 * only to find where the line ends; {@code line_bytes} then gives the whole line's length. What
 * it keeps depends on the line alone, never on where a task's range ends.
 */
public final class LandingSource implements TableProvider {
  public static final String PLANNER_OPTION = "planner";
  public static final StructType SCHEMA = new StructType(new StructField[] {
      DataTypes.createStructField("source", DataTypes.StringType, false),
      DataTypes.createStructField("position", DataTypes.LongType, false),
      DataTypes.createStructField("value", DataTypes.StringType, true),
      DataTypes.createStructField("raw", DataTypes.BinaryType, true),
      DataTypes.createStructField("line_bytes", DataTypes.LongType, true)});
  /** The read option bounding what the reader keeps of one line, in bytes (required). */
  public static final String MAX_LINE_BYTES_OPTION = "maxLineBytes";
  private static final Map<String, LandingPlanner> PLANNERS = new ConcurrentHashMap<>();

  /** Register the planner of one streaming DataFrame; its id is the {@code planner} option. */
  public static String register(LandingPlanner planner) {
    String id = UUID.randomUUID().toString();
    PLANNERS.put(id, planner);
    return id;
  }

  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    return SCHEMA;
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
    String id = new CaseInsensitiveStringMap(properties).get(PLANNER_OPTION);
    LandingPlanner planner = id == null ? null : PLANNERS.get(id);
    if (planner == null) {
      throw new IllegalArgumentException("weir landing source: no planner registered under option "
          + PLANNER_OPTION + "=" + id + " (read it through spark_jobs.landing.read_stream)");
    }
    return new LandingTable(planner);
  }

  /** Not a record: its equality would ask the planner, a Python object, for its hash code. */
  private static final class LandingTable implements SupportsRead {
    private final LandingPlanner planner;

    LandingTable(LandingPlanner planner) {
      this.planner = planner;
    }

    @Override
    public String name() {
      return "weir_landing";
    }

    @Override
    public StructType schema() {
      return SCHEMA;
    }

    @Override
    public Set<TableCapability> capabilities() {
      return EnumSet.of(TableCapability.MICRO_BATCH_READ);
    }

    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
      String bound = options.get(MAX_LINE_BYTES_OPTION);
      if (bound == null) {
        throw new IllegalArgumentException("weir landing source: option " + MAX_LINE_BYTES_OPTION
            + " is required (read it through spark_jobs.landing.read_stream)");
      }
      int maxLineBytes = Integer.parseInt(bound.trim());
      if (maxLineBytes < 1) {
        throw new IllegalArgumentException("weir landing source: " + MAX_LINE_BYTES_OPTION
            + " must be positive, not " + maxLineBytes);
      }
      return () -> new Scan() {
        @Override
        public StructType readSchema() {
          return SCHEMA;
        }

        @Override
        public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
          return new LandingStream(planner, maxLineBytes);
        }
      };
    }
  }

  private static final class JsonOffset extends Offset {
    private final String json;

    JsonOffset(String json) {
      this.json = json;
    }

    @Override
    public String json() {
      return json;
    }
  }

  private static final class LandingStream
      implements MicroBatchStream, SupportsAdmissionControl, SupportsTriggerAvailableNow {
    private static final ObjectMapper JSON = new ObjectMapper();
    private final LandingPlanner planner;
    private final int maxLineBytes;

    LandingStream(LandingPlanner planner, int maxLineBytes) {
      this.planner = planner;
      this.maxLineBytes = maxLineBytes;
    }

    @Override
    public Offset initialOffset() {
      return new JsonOffset(planner.initialOffset());
    }

    @Override
    public Offset deserializeOffset(String json) {
      return new JsonOffset(json);
    }

    @Override
    public ReadLimit getDefaultReadLimit() {
      return ReadLimit.maxBytes(planner.maxBytesPerTrigger());
    }

    @Override
    public Offset latestOffset() {
      throw new UnsupportedOperationException("the landing source is read with a read limit");
    }

    @Override
    public Offset latestOffset(Offset start, ReadLimit limit) {
      long maxBytes;
      if (limit instanceof ReadMaxBytes bytes) {
        maxBytes = bytes.maxBytes();
      } else if (limit instanceof ReadAllAvailable) {
        maxBytes = -1;
      } else {
        throw new UnsupportedOperationException("the landing source does not support " + limit);
      }
      return new JsonOffset(planner.latestOffset(start.json(), maxBytes));
    }

    @Override
    public Offset reportLatestOffset() {
      String latest = planner.reportLatestOffset();
      return latest == null ? null : new JsonOffset(latest);
    }

    @Override
    public void prepareForTriggerAvailableNow() {
      planner.prepareForTriggerAvailableNow();
    }

    @Override
    public InputPartition[] planInputPartitions(Offset start, Offset end) {
      try {
        List<InputPartition> parts = new ArrayList<>();
        String planned = planner.partitions(start.json(), end.json(), minPartitions());
        for (JsonNode part : JSON.readTree(planned)) {
          List<FileRange> ranges = new ArrayList<>();
          for (JsonNode r : part) {
            ranges.add(new FileRange(r.get("path").asText(), r.get("source").asText(),
                r.get("size").asLong(), r.get("mtime_ns").asLong(), r.get("start").asLong(),
                r.get("end").asLong()));
          }
          parts.add(new LandingPartition(ranges.toArray(FileRange[]::new)));
        }
        return parts.toArray(InputPartition[]::new);
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
    }

    /**
     * How many tasks a batch is cut into at least, as Spark's file source plans them
     * ({@code FilePartition.maxSplitBytes}): {@code spark.sql.files.minPartitionNum}, else the
     * session's leaf-node parallelism, by default the cluster's cores.
     */
    private static int minPartitions() {
      RuntimeConfig conf = SparkSession.active().conf();
      Option<String> set = conf.getOption("spark.sql.files.minPartitionNum");
      if (set.isEmpty()) {
        set = conf.getOption("spark.sql.leafNodeDefaultParallelism");
      }
      return set.isDefined() ? Integer.parseInt(set.get().trim())
          : SparkSession.active().sparkContext().defaultParallelism();
    }

    @Override
    public PartitionReaderFactory createReaderFactory() {
      return new ReaderFactory(maxLineBytes);
    }

    @Override
    public void commit(Offset end) {}

    @Override
    public void stop() {}

    @Override
    public String toString() {
      return "WeirLanding";
    }
  }

  /** Bytes {@code [start, end)} of one discovered file version; owns the lines that begin inside. */
  record FileRange(String path, String source, long size, long mtimeNs, long start, long end)
      implements Serializable {}

  record LandingPartition(FileRange[] ranges) implements InputPartition {}

  private static final class ReaderFactory implements PartitionReaderFactory {
    private final int maxLineBytes;

    ReaderFactory(int maxLineBytes) {
      this.maxLineBytes = maxLineBytes;
    }

    @Override
    public PartitionReader<InternalRow> createReader(InputPartition partition) {
      return new LinesReader(((LandingPartition) partition).ranges(), maxLineBytes);
    }
  }

  /** The lines of a task's ranges, one range after another. */
  static final class LinesReader implements PartitionReader<InternalRow> {
    private static final int FIRST_STEP = 1 << 16;
    private static final int MAX_STEP = 16 << 20;
    private static final int TOO_LONG = -2;   // `newline`: the line is longer than maxLineBytes
    private final FileRange[] ranges;
    private final int maxLineBytes;
    private int next = 0;
    private FileRange range;
    private UTF8String source;
    private FileChannel channel;
    private byte[] buf = new byte[0];
    private int len;            // bytes of buf read, from file offset `base`
    private long base;
    private int line = -1;      // start of the next line in buf; -1: no range open
    private final GenericInternalRow row = new GenericInternalRow(5);

    LinesReader(FileRange[] ranges, int maxLineBytes) {
      this.ranges = ranges;
      this.maxLineBytes = maxLineBytes;
    }

    @Override
    public boolean next() throws IOException {
      while (true) {
        if (line >= 0 && base + line < range.end()) {
          emitLine();
          return true;
        }
        closeRange();
        if (next == ranges.length) {
          return false;
        }
        openRange(ranges[next++]);
      }
    }

    @Override
    public InternalRow get() {
      return row;
    }

    @Override
    public void close() throws IOException {
      if (channel != null) {
        channel.close();
        channel = null;
      }
    }

    private void openRange(FileRange r) throws IOException {
      checkUnchanged(r);
      range = r;
      source = UTF8String.fromString(r.source());
      long a = r.start();
      base = Math.max(a - 1, 0);
      channel = FileChannel.open(Path.of(r.path()), StandardOpenOption.READ);
      int want = Math.toIntExact(r.end() - base);
      buf = new byte[want];
      len = 0;
      fill(want);
      if (len != want) {
        throw new IOException(r.path() + " is shorter than its manifest entry (" + r.size() + ")");
      }
      if (a == 0) {
        line = 0;
      } else if (buf[0] == '\n') {
        line = 1;               // byte a - 1 ends a line: a line starts at a
      } else {
        // the partial line this range starts in belongs to the range before
        int nl = newline(1, false);
        line = nl < 0 ? len : nl + 1;
      }
    }

    private void closeRange() throws IOException {
      if (line >= 0) {
        close();
        checkUnchanged(range);  // changed while read: fail rather than emit a mix
        line = -1;
      }
    }

    /** The line starting at {@code line} as the current row; {@code line} moves to the next. */
    private void emitLine() throws IOException {
      int start = line;
      long position = base + start;
      int nl = newline(start, true);
      boolean cut = nl == TOO_LONG;
      int end = cut ? characterStart(buf, start, start + maxLineBytes) : nl < 0 ? len : nl;
      int content = start;
      if (position == 0 && end - start >= 3 && buf[0] == (byte) 0xEF && buf[1] == (byte) 0xBB
          && buf[2] == (byte) 0xBF) {
        content = 3;            // a UTF-8 byte-order mark; the line's position stays 0
      }
      int contentEnd = !cut && end > content && buf[end - 1] == '\r' ? end - 1 : end;
      UTF8String value = UTF8String.fromBytes(buf, content, contentEnd - content);
      byte[] raw = null;
      if (!ascii(buf, content, contentEnd) && !value.isValid()) {
        raw = Arrays.copyOfRange(buf, content, contentEnd);
        value = value.makeValid();
      }
      row.update(0, source);
      row.setLong(1, position);
      row.update(2, value);
      row.update(3, raw);
      if (cut) {
        long lineEnd = lineEnd(position + maxLineBytes + 1);
        row.setLong(4, lineEnd - position);
        continueAt(lineEnd + 1);
      } else {
        row.setNullAt(4);
        line = nl < 0 ? len : nl + 1;
      }
    }

    /** Where in {@code b} the character holding byte {@code end - 1} starts when it does not end
     * at {@code end} (a multi-byte UTF-8 character cut there), else {@code end}: a line cut at
     * {@code end} keeps whole characters only. Bytes that are not UTF-8 are left as they are. */
    private static int characterStart(byte[] b, int from, int end) {
      int lead = end - 1;
      while (lead > from && lead > end - 4 && (b[lead] & 0xC0) == 0x80) {
        lead--;                 // a continuation byte: back to its character's first byte
      }
      int width = (b[lead] & 0xE0) == 0xC0 ? 2 : (b[lead] & 0xF0) == 0xE0 ? 3
          : (b[lead] & 0xF8) == 0xF0 ? 4 : 1;
      return lead + width > end ? lead : end;
    }

    /** The file offset of the {@code \n} ending the line that runs on at {@code from}, or the
     * file's size: the rest of a line longer than what is kept, read in steps and not kept. */
    private long lineEnd(long from) throws IOException {
      ByteBuffer step = ByteBuffer.allocate(FIRST_STEP);
      long at = from;
      while (at < range.size()) {
        step.clear();
        int n = channel.read(step, at);
        if (n < 0) {
          break;
        }
        for (int i = 0; i < n; i++) {
          if (step.get(i) == '\n') {
            return at + i;
          }
        }
        at += n;
      }
      return range.size();
    }

    /** The next line starts at file offset {@code next}: past the range's end the range is done,
     * else the rest of the range is read from there. */
    private void continueAt(long next) throws IOException {
      base = next;
      len = 0;
      line = 0;
      int want = (int) Math.max(0, range.end() - next);   // at most the range's size
      buf = new byte[want];     // rows already emitted keep the old array
      fill(want);
      if (len != want) {
        throw new IOException(range.path() + " is shorter than its manifest entry (" + range.size() + ")");
      }
    }

    /** Whether {@code b[from, to)} is ASCII only, and so valid UTF-8: one test per byte, where
     * {@link UTF8String#isValid} decodes each character (1.8 % of an ingest's CPU samples). */
    private static boolean ascii(byte[] b, int from, int to) {
      int any = 0;
      for (int i = from; i < to; i++) {
        any |= b[i];
      }
      return any >= 0;
    }

    /** The index of the first {@code \n} at or after {@code from}; with {@code readOn}, the end
     * of the line starting at {@code from}, reading past the range's end (to finish its last line)
     * until one is found, the file ends (-1) or the line is longer than {@code maxLineBytes}
     * ({@link #TOO_LONG}: buf then holds its first {@code maxLineBytes} bytes and no more of it).
     * Without {@code readOn}, -1 when buf holds none. */
    private int newline(int from, boolean readOn) throws IOException {
      int i = from;
      long keep = (long) from + maxLineBytes;   // the line's bytes kept end here
      while (true) {
        int stop = readOn ? (int) Math.min(len, keep + 1) : len;
        for (; i < stop; i++) {
          if (buf[i] == '\n') {
            return i;
          }
        }
        if (readOn && i > keep) {
          return TOO_LONG;      // maxLineBytes bytes and the one after them, none of them a \n
        }
        if (!readOn || base + len >= range.size()) {
          return -1;
        }
        // read on, but never further than the byte after the most a line keeps
        int step = (int) Math.min(Math.min(Math.min(Math.max(len, FIRST_STEP), MAX_STEP),
            range.size() - base - len), keep + 1 - len);
        if (len + step > buf.length) {
          buf = Arrays.copyOf(buf, len + step);   // rows already emitted keep the old array
        }
        int before = len;
        fill(len + step);
        if (len == before) {
          return -1;
        }
      }
    }

    /** Read from the file into buf until it holds {@code upTo} bytes or the file ends. */
    private void fill(int upTo) throws IOException {
      ByteBuffer target = ByteBuffer.wrap(buf, len, upTo - len);
      while (target.hasRemaining()) {
        int n = channel.read(target, base + target.position());
        if (n < 0) {
          break;
        }
      }
      len = target.position();
    }

    private static void checkUnchanged(FileRange r) throws IOException {
      BasicFileAttributes attrs;
      try {
        attrs = Files.readAttributes(Path.of(r.path()), BasicFileAttributes.class);
      } catch (NoSuchFileException e) {
        throw new IOException(r.path() + " vanished before it was read (manifest entry " + r + ")", e);
      }
      long mtimeNs = attrs.lastModifiedTime().to(TimeUnit.NANOSECONDS);
      if (attrs.size() != r.size() || mtimeNs != r.mtimeNs()) {
        throw new IOException(r.path() + " changed after discovery: size/mtime_ns " + attrs.size()
            + "/" + mtimeNs + ", manifest " + r.size() + "/" + r.mtimeNs()
            + "; its content can no longer be read as discovered");
      }
    }
  }
}
