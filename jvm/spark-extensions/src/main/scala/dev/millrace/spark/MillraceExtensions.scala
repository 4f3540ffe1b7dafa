package dev.millrace.spark

import org.apache.spark.sql.SparkSessionExtensions
import org.apache.spark.sql.catalyst.FunctionIdentifier

/**
 * What millrace adds to every Spark session it starts (`spark.sql.extensions`): the planning
 * of an input's low watermark, [[LowWatermarkStrategy]], the aggregate that reports its
 * buckets' progress, [[BucketMaxima]], and the UTF-8 check of every record read, [[IsUtf8]].
 */
class MillraceExtensions extends (SparkSessionExtensions => Unit) {
  override def apply(extensions: SparkSessionExtensions): Unit = {
    extensions.injectPlannerStrategy(new LowWatermarkStrategy(_))
    extensions.injectFunction(
      (FunctionIdentifier(BucketMaxima.Name), BucketMaxima.info, BucketMaxima.build _))
    extensions.injectFunction((FunctionIdentifier(IsUtf8.Name), IsUtf8.info, IsUtf8.build _))
  }
}
