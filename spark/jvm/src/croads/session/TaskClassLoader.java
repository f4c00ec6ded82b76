package croads.session;

import java.util.Collections;
import org.apache.spark.SparkContext;
import org.apache.spark.SparkEnv;
import org.apache.spark.api.java.JavaSparkContext;

/**
 * In local mode, the tasks' class loader made the driver thread's context class loader, so that the driver and
 * the tasks share Spark's cache of compiled generated classes.
 *
 * <p>Spark keys that cache by the context class loader. A whole stage's code is compiled by Janino on the driver
 * (to check it) and again in the first task that runs it, whose context class loader is the executor's (a child of
 * the driver's, with the jars added to the session): in local mode, where both run in one JVM, each whole stage's
 * class was compiled twice. With the tasks' loader as the driver thread's, a task finds the driver's class. That
 * loader asks the driver's first, so the driver resolves every class as before.
 */
public final class TaskClassLoader {
    /** The executor's environment (one per SparkContext) and its tasks' class loader, as one task found them. */
    private static volatile Object[] found;

    private TaskClassLoader() {
    }

    /**
     * Makes the local tasks' class loader this thread's context class loader; true if it did (local mode only:
     * elsewhere the tasks run in other JVMs). The first call per SparkContext runs one task (no generated code) to
     * find it.
     */
    public static boolean shareWithThisThread(SparkContext context) {
        if (!context.isLocal()) {
            return false;
        }
        ClassLoader loader = loader(SparkEnv.get());
        if (loader == null) {
            JavaSparkContext.fromSparkContext(context).parallelize(Collections.singletonList(0), 1)
                    .foreachPartition(rows -> remember());
            loader = loader(SparkEnv.get());
        }
        if (loader == null) {  // the task ran in a class loader of its own: nothing to share
            return false;
        }
        Thread.currentThread().setContextClassLoader(loader);
        return true;
    }

    private static ClassLoader loader(SparkEnv env) {
        Object[] pair = found;
        return pair != null && pair[0] == env ? (ClassLoader) pair[1] : null;
    }

    private static void remember() {
        found = new Object[] {SparkEnv.get(), Thread.currentThread().getContextClassLoader()};
    }
}
