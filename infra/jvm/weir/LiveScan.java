package weir;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.AttributeReference;
import org.apache.spark.sql.catalyst.expressions.BoundReference;
import org.apache.spark.sql.catalyst.expressions.Cast;
import org.apache.spark.sql.catalyst.expressions.EvalMode$;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.ExpressionSet;
import org.apache.spark.sql.catalyst.expressions.ExpressionSet$;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.expressions.InterpretedPredicate;
import org.apache.spark.sql.catalyst.expressions.Literal;
import org.apache.spark.sql.catalyst.expressions.Predicate$;
import org.apache.spark.sql.catalyst.expressions.SubqueryExpression$;
import org.apache.spark.sql.delta.DeltaTableUtils;
import org.apache.spark.sql.delta.GeneratedColumn;
import org.apache.spark.sql.delta.NoMapping$;
import org.apache.spark.sql.delta.Snapshot;
import org.apache.spark.sql.delta.actions.AddFile;
import org.apache.spark.sql.delta.stats.DataSize;
import org.apache.spark.sql.delta.stats.DeltaDataSkippingType$;
import org.apache.spark.sql.delta.stats.DeltaScan;
import org.apache.spark.sql.delta.stats.DeltaScanGenerator;
import org.apache.spark.sql.delta.stats.PrepareDeltaScan;
import org.apache.spark.sql.execution.datasources.LogicalRelation;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;
import scala.Option;
import scala.PartialFunction$;
import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;

/**
 * Delta's {@code PrepareDeltaScan} (the optimizer rule that gives each read of a Delta table its
 * files), with the files of a read listed by {@link LiveFiles} rather than by a Spark query.
 *
 * <p>Delta picks a read's files with a Spark job over the snapshot's cached state (its partition
 * filter, then its statistics), once for every Delta table a query reads, and rebuilds that state
 * first for a version it has not read yet: about 0.17 s of driver work per read on a table of a few
 * files, whatever the data, and 2.4 s of a 5-6 s back-fill of a small date (docs/performance.md,
 * "A small back-fill's time"). Here the snapshot's files come from the driver's list of the table
 * (the version listed before, brought forward by the commits since) and are chosen in the driver:
 *
 * <ul>
 *   <li>exactly by each condition on partition columns only, evaluated on the file's partition
 *       values cast to the columns' types, as Delta evaluates them (Spark then drops those
 *       conditions from the scan: the files must be exactly the partitions that meet them);</li>
 *   <li>conservatively by the others, from each file's minimum, maximum and null count
 *       ({@link LiveFiles#mayHold}): a file is left out only when they prove no row of it meets a
 *       condition; Spark still applies every such condition to the rows read.</li>
 * </ul>
 *
 * <p>Delta's own path runs instead where this one is not exact or not wanted: a read inside a
 * transaction of the same table (its reads must be registered with the transaction), a read with
 * a limit, a table with column mapping, a table whose list is too large for the driver, and a
 * partition condition that is not deterministic or holds a subquery. The rule is registered before
 * Delta's ({@link Extensions}), which then finds no read left to prepare.
 */
public final class LiveScan extends PrepareDeltaScan {
  /** Off ({@code false}): every read is prepared by Delta, as without this rule. */
  public static final String ENABLED = "spark.weir.liveScan.enabled";

  private final SparkSession spark;

  public LiveScan(SparkSession spark) {
    super(spark);
    this.spark = spark;
  }

  @Override
  public DeltaScan filesForScan(DeltaScanGenerator generator, Option<Object> limit,
      Seq<Expression> filters, LogicalRelation delta) {
    if (limit.isEmpty() && generator instanceof Snapshot snapshot
        && Boolean.parseBoolean(spark.conf().get(ENABLED, "true"))) {
      List<Expression> all = new ArrayList<>(CollectionConverters.asJava(filters));
      if (GeneratedColumn.partitionFilterOptimizationEnabled(spark)) {
        all.addAll(CollectionConverters.asJava(
            GeneratedColumn.generatePartitionFilters(spark, snapshot, filters, delta)));
      }
      DeltaScan scan = scan(snapshot, all);
      if (scan != null) {
        return scan;
      }
    }
    return super.filesForScan(generator, limit, filters, delta);
  }

  /** The files of {@code snapshot} a read with {@code filters} (conjuncts) needs, or null when
   * they are not listed here. */
  private DeltaScan scan(Snapshot snapshot, List<Expression> filters) {
    long start = System.nanoTime();
    if (snapshot.version() < 0
        || !NoMapping$.MODULE$.equals(snapshot.metadata().columnMappingMode())) {
      return null;
    }
    Seq<String> partitionColumns = snapshot.metadata().partitionColumns();
    List<Expression> onPartitions = new ArrayList<>();
    List<Expression> onData = new ArrayList<>();
    for (Expression f : filters) {
      if (DeltaTableUtils.isPredicatePartitionColumnsOnly(f, partitionColumns, spark)) {
        if (!f.deterministic() || SubqueryExpression$.MODULE$.hasSubquery(f)) {
          return null;
        }
        onPartitions.add(f);
      } else {
        onData.add(f);
      }
    }
    StructType partitionSchema = snapshot.metadata().partitionSchema();
    InterpretedPredicate partitionsMeet = onPartitions.isEmpty() ? null
        : bound(onPartitions, partitionSchema);
    if (!onPartitions.isEmpty() && partitionsMeet == null) {
      return null;
    }
    Iterable<AddFile> listed = LiveFiles.live(snapshot.deltaLog(), snapshot);
    if (listed == null) {
      return null;
    }
    Set<String> partitionNames = Set.copyOf(
        CollectionConverters.asJava(partitionColumns));
    Map<scala.collection.immutable.Map<String, String>, Boolean> byPartition = new HashMap<>();
    long[] total = new long[2];
    long[] inPartitions = new long[2];
    long[] scanned = new long[2];
    List<AddFile> files = new ArrayList<>();
    for (AddFile f : listed) {
      count(total, f);
      if (partitionsMeet != null && !byPartition.computeIfAbsent(f.partitionValues(),
          values -> partitionsMeet.eval(row(values, partitionSchema)))) {
        continue;
      }
      count(inPartitions, f);
      if (!LiveFiles.mayHold(f, onData, partitionNames)) {
        continue;
      }
      count(scanned, f);
      files.add(f);
    }
    return new DeltaScan(snapshot.version(), CollectionConverters.asScala(files).toList(),
        size(total), size(inPartitions), size(scanned), snapshot, set(onPartitions), set(onData),
        set(List.of()), scala.collection.immutable.Set$.MODULE$.<Expression>empty(), set(List.of()),
        (System.nanoTime() - start) / 1_000_000, skippingType(onPartitions, onData));
  }

  /** {@code conditions} (on partition columns only) as one predicate over a row of the partition
   * values in {@code schema}'s order, or null when a column cannot be found in it. */
  private InterpretedPredicate bound(List<Expression> conditions, StructType schema) {
    boolean caseSensitive = SQLConf.get().caseSensitiveAnalysis();
    boolean[] unknown = {false};
    Expression condition = conditions.stream()
        .reduce(org.apache.spark.sql.catalyst.expressions.And::new).orElseThrow();
    Expression bound = condition.transform(PartialFunction$.MODULE$.fromFunction(e -> {
      if (!(e instanceof AttributeReference a)) {
        return e;
      }
      StructField[] fields = schema.fields();
      for (int i = 0; i < fields.length; i++) {
        String name = fields[i].name();
        if (caseSensitive ? name.equals(a.name()) : name.equalsIgnoreCase(a.name())) {
          return new BoundReference(i, fields[i].dataType(), true);
        }
      }
      unknown[0] = true;
      return e;
    }));
    return unknown[0] ? null : Predicate$.MODULE$.createInterpreted(bound);
  }

  /** A file's partition values (Delta keeps them as text, null for a null value) as a row of
   * {@code schema}'s types, cast as Delta's file index casts them (ANSI off: a value that does not
   * cast reads as null). */
  private static InternalRow row(scala.collection.immutable.Map<String, String> values,
      StructType schema) {
    StructField[] fields = schema.fields();
    Object[] row = new Object[fields.length];
    Option<String> zone = Option.apply(SQLConf.get().sessionLocalTimeZone());
    for (int i = 0; i < fields.length; i++) {
      Option<String> text = values.get(fields[i].name());
      Literal value = text.isEmpty() || text.get() == null
          ? Literal.create(null, DataTypes.StringType)
          : Literal.create(UTF8String.fromString(text.get()), DataTypes.StringType);
      row[i] = new Cast(value, fields[i].dataType(), zone, EvalMode$.MODULE$.LEGACY()).eval(null);
    }
    return new GenericInternalRow(row);
  }

  private static void count(long[] counted, AddFile f) {
    counted[0] += f.size();
    counted[1] += 1;
  }

  private static DataSize size(long[] counted) {
    return new DataSize(Option.<Object>apply(counted[0]), Option.empty(),
        Option.<Object>apply(counted[1]), Option.empty());
  }

  private static ExpressionSet set(List<Expression> expressions) {
    return ExpressionSet$.MODULE$.apply(CollectionConverters.asScala(expressions).toList());
  }

  private static scala.Enumeration.Value skippingType(List<Expression> onPartitions,
      List<Expression> onData) {
    DeltaDataSkippingType$ type = DeltaDataSkippingType$.MODULE$;
    if (onPartitions.isEmpty()) {
      return onData.isEmpty() ? type.noSkippingV1() : type.dataSkippingOnlyV1();
    }
    return onData.isEmpty() ? type.partitionFilteringOnlyV1()
        : type.dataSkippingAndPartitionFilteringV1();
  }
}
