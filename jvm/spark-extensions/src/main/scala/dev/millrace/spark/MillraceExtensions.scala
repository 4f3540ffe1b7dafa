package dev.millrace.spark

import org.apache.spark.sql.SparkSessionExtensions
import org.apache.spark.sql.catalyst.FunctionIdentifier

/**
 * What millrace adds to every Spark session it starts (`spark.sql.extensions`):
 *  - the planning of an input's low watermark, [[LowWatermarkStrategy]];
 *  - the planning of a query's filter below its input's deduplication, [[RecordDedupStrategy]];
 *  - the aggregate that reports an input's buckets' progress, [[BucketMaxima]];
 *  - the parse of every record's value, [[ParseValue]], and its UTF-8 check, [[IsUtf8]];
 *  - the read of a processor's record's key and event time, [[KeyAndTime]].
 * ([[IdlePolling]], a listener, is attached by millrace to the sessions that run apps.)
 */
class MillraceExtensions extends (SparkSessionExtensions => Unit) {
  override def apply(extensions: SparkSessionExtensions): Unit = {
    extensions.injectPlannerStrategy(new LowWatermarkStrategy(_))
    extensions.injectPlannerStrategy(_ => new RecordDedupStrategy)
    extensions.injectFunction(
      (FunctionIdentifier(BucketMaxima.Name), BucketMaxima.info, BucketMaxima.build _))
    extensions.injectFunction((FunctionIdentifier(IsUtf8.Name), IsUtf8.info, IsUtf8.build _))
    extensions.injectFunction(
      (FunctionIdentifier(ParseValue.Name), ParseValue.info, ParseValue.build _))
    extensions.injectFunction(
      (FunctionIdentifier(KeyAndTime.Name), KeyAndTime.info, KeyAndTime.build _))
  }
}
