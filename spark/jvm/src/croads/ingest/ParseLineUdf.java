package croads.ingest;

import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.api.java.UDF1;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;

/**
 * {@link LineParser} as a Spark SQL function: a line's bytes (null: no line) to
 * {@code struct<reason, r struct<fields...>, properties map, kinds map, details map, standard struct<names...>,
 * standardKinds struct<names...>>}, all text: {@code properties}/{@code kinds} the properties that are not in
 * {@code standard} (null when the properties are not an object).
 * spark/parse.py registers it with {@link #register} (the field names and the reasons are its contract).
 */
public final class ParseLineUdf implements UDF1<byte[], Row> {
    private static final long serialVersionUID = 1L;

    private final String[] fields;
    private final String[] standard;
    private final String[] reasons;
    private final String nonNumber;
    /** A parser per thread: Spark may run several tasks over one instance of the function. */
    private transient volatile ThreadLocal<LineParser> parsers;

    ParseLineUdf(String[] fields, String[] standard, String[] reasons, String nonNumber) {
        this.fields = fields;
        this.standard = standard;
        this.reasons = reasons;
        this.nonNumber = nonNumber;
    }

    /**
     * Registers the function as {@code name} in the session.
     *
     * @param fields    the record's top-level fields read as text, separated by commas
     * @param standard  the properties of tables 1-7, separated by commas
     * @param reasons   NOT_UTF8, SURROGATE, NON_NUMBER, TRAILING, NOT_OBJECT, MALFORMED, DUPLICATE_KEY,
     *                  OUT_OF_RANGE of spark/parse.py, separated by line feeds
     * @param nonNumber the regex of NaN/Infinity values outside strings (group 1)
     */
    public static void register(SparkSession spark, String name, String fields, String standard, String reasons,
                                String nonNumber) {
        ParseLineUdf udf = new ParseLineUdf(fields.split(","), standard.split(","), reasons.split("\n", -1), nonNumber);
        if (udf.reasons.length != 8) {
            throw new IllegalArgumentException("8 reasons expected, got " + udf.reasons.length);
        }
        spark.udf().register(name, udf, udf.returnType());
    }

    private static DataType textStruct(String[] names) {
        StructField[] struct = new StructField[names.length];
        for (int i = 0; i < names.length; i++) {
            struct[i] = DataTypes.createStructField(names[i], DataTypes.StringType, true);
        }
        return DataTypes.createStructType(struct);
    }

    DataType returnType() {
        DataType map = DataTypes.createMapType(DataTypes.StringType, DataTypes.StringType, true);
        return DataTypes.createStructType(new StructField[] {
            DataTypes.createStructField("reason", DataTypes.StringType, true),
            DataTypes.createStructField("r", textStruct(fields), true),
            DataTypes.createStructField("properties", map, true),
            DataTypes.createStructField("kinds", map, true),
            DataTypes.createStructField("details", map, true),
            DataTypes.createStructField("standard", textStruct(standard), true),
            DataTypes.createStructField("standardKinds", textStruct(standard), true),
        });
    }

    private LineParser parser() {
        ThreadLocal<LineParser> local = parsers;
        if (local == null) {
            synchronized (this) {
                if (parsers == null) {
                    parsers = ThreadLocal.withInitial(() -> new LineParser(fields, standard, new LineParser.Reasons(reasons[0],
                            reasons[1], reasons[2], reasons[3], reasons[4], reasons[5], reasons[6], reasons[7]), nonNumber));
                }
                local = parsers;
            }
        }
        return local.get();
    }

    @Override
    public Row call(byte[] line) {
        if (line == null) {
            return null;
        }
        LineParser.Result result = parser().parse(line);
        Row record = result.reason == null ? RowFactory.create((Object[]) result.fields) : null;
        Row standardRow = result.standard == null ? null : RowFactory.create((Object[]) result.standard);
        Row kindsRow = result.standardKinds == null ? null : RowFactory.create((Object[]) result.standardKinds);
        return RowFactory.create(result.reason, record, result.properties, result.kinds, result.details, standardRow,
                kindsRow);
    }
}
