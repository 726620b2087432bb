package weir;

import org.apache.spark.sql.SparkSessionExtensions;
import scala.runtime.AbstractFunction1;
import scala.runtime.BoxedUnit;

/**
 * Weir's session extensions ({@code spark.sql.extensions}, listed before Delta's, whose rules then
 * run after these): {@link LiveScan} prepares the reads of Delta tables.
 */
public final class Extensions extends AbstractFunction1<SparkSessionExtensions, BoxedUnit> {
  @Override
  public BoxedUnit apply(SparkSessionExtensions extensions) {
    extensions.injectPreCBORule(LiveScan::new);
    return BoxedUnit.UNIT;
  }
}
