package dev.millrace.spark

import org.apache.spark.sql.SparkSessionExtensions

/**
 * What millrace adds to every Spark session it starts (`spark.sql.extensions`): the planning
 * of an input's low watermark, [[LowWatermarkStrategy]].
 */
class MillraceExtensions extends (SparkSessionExtensions => Unit) {
  override def apply(extensions: SparkSessionExtensions): Unit =
    extensions.injectPlannerStrategy(new LowWatermarkStrategy(_))
}
