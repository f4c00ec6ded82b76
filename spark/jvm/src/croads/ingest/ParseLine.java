package croads.ingest;

import java.io.Serializable;
import java.util.Map;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.expressions.codegen.CodegenContext;
import org.apache.spark.sql.catalyst.expressions.codegen.ExprCode;
import org.apache.spark.sql.catalyst.util.ArrayBasedMapData;
import org.apache.spark.sql.catalyst.util.GenericArrayData;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.unsafe.types.UTF8String;

import scala.collection.immutable.IndexedSeq;
import scala.collection.immutable.List$;
import scala.collection.immutable.Seq;

import croads.catalyst.JavaExpression;

/**
 * {@link LineParser} as a Spark SQL expression: a line (a string; null: no line) to
 * {@code struct<reason, r struct<fields...>, properties map, kinds map, details map, standard struct<names...>,
 * standardKinds struct<names...>>}, all text: {@code properties}/{@code kinds} the properties that are not in
 * {@code standard} (null when the properties are not an object).
 *
 * <p>An expression rather than a user-defined function: it hands Spark its internal rows itself (UTF8String,
 * map data), so no external {@code Row} is built and converted per line and the generated code calls it
 * directly. spark/parse.py registers it with {@link #register} (the field names and the reasons are its contract).
 *
 * <p>A line that is plainly one record is read by {@link RecordScanner} straight from its UTF-8 bytes (its strings
 * are views of the line's copy: no Java string decoded and encoded back); any other line by the strict Jackson path
 * of {@link LineParser}, which gives every reason. The reference function ({@link #REFERENCE}) reads every line by
 * the strict path: the same rows, the tests hold the two equal.
 */
public final class ParseLine extends JavaExpression implements Serializable {
    private static final long serialVersionUID = 1L;

    /** What spark/parse.py hands over: the fields of {@code r}, tables 1-7's properties, the reasons, NaN's regex. */
    public static final class Contract implements Serializable {
        private static final long serialVersionUID = 1L;
        final String[] fields;
        final String[] standard;
        final String[] reasons;
        final String nonNumber;

        Contract(String[] fields, String[] standard, String[] reasons, String nonNumber) {
            if (reasons.length != 8) {
                throw new IllegalArgumentException("8 reasons expected, got " + reasons.length);
            }
            this.fields = fields;
            this.standard = standard;
            this.reasons = reasons;
            this.nonNumber = nonNumber;
        }

        LineParser parser() {
            return new LineParser(fields, standard, new LineParser.Reasons(reasons[0], reasons[1], reasons[2],
                    reasons[3], reasons[4], reasons[5], reasons[6], reasons[7]), nonNumber);
        }

        @Override
        public boolean equals(Object other) {
            return other instanceof Contract && java.util.Arrays.equals(fields, ((Contract) other).fields)
                    && java.util.Arrays.equals(standard, ((Contract) other).standard)
                    && java.util.Arrays.equals(reasons, ((Contract) other).reasons)
                    && nonNumber.equals(((Contract) other).nonNumber);
        }

        @Override
        public int hashCode() {
            return java.util.Arrays.hashCode(fields) * 31 + nonNumber.hashCode();
        }

        @Override
        public String toString() {
            return "log line contract";
        }
    }

    private final Expression line;
    private final Seq<Expression> children;
    private final Contract contract;
    /** Whether a line that is plainly one record is read by {@link RecordScanner} (false: the reference, Jackson only). */
    private final boolean scan;
    private final DataType type;
    /** A parser per thread: the generated code of several tasks may share one instance of the expression. */
    private transient volatile ThreadLocal<LineParser> parsers;

    public ParseLine(Expression line, Contract contract, boolean scan) {
        this.line = line;
        this.children = List$.MODULE$.<Expression>empty().$colon$colon(line);
        this.contract = contract;
        this.scan = scan;
        this.type = returnType(contract);
    }

    /** The suffix of the reference function's name: every line read by the strict Jackson path alone. */
    public static final String REFERENCE = "_reference";

    /**
     * Registers the expression as the function {@code name} of the session (one argument: the line), and as
     * {@code name} + {@link #REFERENCE} the same without {@link RecordScanner} (what the scanner is tested against).
     *
     * @param fields    the record's top-level fields read as text, separated by commas
     * @param standard  the properties of tables 1-7, separated by commas
     * @param reasons   NOT_UTF8, SURROGATE, NON_NUMBER, TRAILING, NOT_OBJECT, MALFORMED, DUPLICATE_KEY,
     *                  OUT_OF_RANGE of spark/parse.py, separated by line feeds
     * @param nonNumber the regex of NaN/Infinity values outside strings (group 1)
     */
    public static void register(org.apache.spark.sql.classic.SparkSession spark, String name, String fields,
                                String standard, String reasons, String nonNumber) {
        Contract contract = new Contract(fields.split(","), standard.split(","), reasons.split("\n", -1), nonNumber);
        for (boolean scan : new boolean[] {true, false}) {
            String function = scan ? name : name + REFERENCE;
            spark.sessionState().functionRegistry().createOrReplaceTempFunction(function, arguments -> {
                if (arguments.size() != 1) {
                    throw new IllegalArgumentException(function + " takes one argument (the line), not " + arguments.size());
                }
                return new ParseLine(arguments.head(), contract, scan);
            }, "java_udf");
        }
    }

    private static DataType textStruct(String[] names) {
        StructField[] struct = new StructField[names.length];
        for (int i = 0; i < names.length; i++) {
            struct[i] = DataTypes.createStructField(names[i], DataTypes.StringType, true);
        }
        return DataTypes.createStructType(struct);
    }

    static DataType returnType(Contract contract) {
        DataType map = DataTypes.createMapType(DataTypes.StringType, DataTypes.StringType, true);
        return DataTypes.createStructType(new StructField[] {
            DataTypes.createStructField("reason", DataTypes.StringType, true),
            DataTypes.createStructField("r", textStruct(contract.fields), true),
            DataTypes.createStructField("properties", map, true),
            DataTypes.createStructField("kinds", map, true),
            DataTypes.createStructField("details", map, true),
            DataTypes.createStructField("standard", textStruct(contract.standard), true),
            DataTypes.createStructField("standardKinds", textStruct(contract.standard), true),
        });
    }

    private LineParser parser() {
        ThreadLocal<LineParser> local = parsers;
        if (local == null) {
            synchronized (this) {
                if (parsers == null) {
                    parsers = ThreadLocal.withInitial(contract::parser);
                }
                local = parsers;
            }
        }
        return local.get();
    }

    /** The line's row (called by the generated code); the line is not null. */
    public InternalRow parse(UTF8String text) {
        byte[] line = text.getBytes();
        LineParser parser = parser();
        Object[] row = scan ? parser.scan(line) : null;
        return new GenericInternalRow(row != null ? row : values(parser.parse(line)));
    }

    /** The strict path's result as the row's values. */
    private static Object[] values(LineParser.Result result) {
        return new Object[] {
            utf8(result.reason),
            result.reason == null ? texts(result.fields) : null,
            map(result.properties),
            map(result.kinds),
            map(result.details),
            result.standard == null ? null : texts(result.standard),
            result.standardKinds == null ? null : texts(result.standardKinds),
        };
    }

    private static UTF8String utf8(String text) {
        return text == null ? null : UTF8String.fromString(text);
    }

    private static InternalRow texts(String[] values) {
        Object[] row = new Object[values.length];
        for (int i = 0; i < values.length; i++) {
            row[i] = utf8(values[i]);
        }
        return new GenericInternalRow(row);
    }

    private static ArrayBasedMapData map(Map<String, String> entries) {
        if (entries == null) {
            return null;
        }
        Object[] keys = new Object[entries.size()];
        Object[] values = new Object[keys.length];
        int i = 0;
        for (Map.Entry<String, String> entry : entries.entrySet()) {
            keys[i] = UTF8String.fromString(entry.getKey());
            values[i] = utf8(entry.getValue());
            i++;
        }
        return new ArrayBasedMapData(new GenericArrayData(keys), new GenericArrayData(values));
    }

    @Override
    public Seq<Expression> children() {
        return children;
    }

    @Override
    public DataType dataType() {
        return type;
    }

    @Override
    public boolean nullable() {
        return line.nullable();
    }

    /**
     * Expensive, as a user-defined function is: the optimizer then keeps it in its projection, evaluated once per
     * line, instead of copying it into each filter and field that reads its result.
     */
    @Override
    public boolean expensive() {
        return true;
    }

    @Override
    public Object eval(InternalRow input) {
        Object text = line.eval(input);
        return text == null ? null : parse((UTF8String) text);
    }

    @Override
    public ExprCode doGenCode(CodegenContext ctx, ExprCode ev) {
        String self = ctx.addReferenceObj("parseLine", this, ParseLine.class.getName());
        ExprCode text = line.genCode(ctx);
        String code = text.code() + "\n"
                + "boolean " + ev.isNull() + " = " + text.isNull() + ";\n"
                + "InternalRow " + ev.value() + " = null;\n"
                + "if (!" + ev.isNull() + ") {\n"
                + "  " + ev.value() + " = " + self + ".parse(" + text.value() + ");\n"
                + "}";
        return withCode(ev, code);
    }

    @Override
    protected Object[] arguments() {
        return new Object[] {line, contract, scan};
    }

    @Override
    public Expression withNewChildrenInternal(IndexedSeq<Expression> newChildren) {
        return new ParseLine(newChildren.apply(0), contract, scan);
    }

    @Override
    public String prettyName() {
        return scan ? "croads_parse_log_line" : "croads_parse_log_line" + REFERENCE;
    }
}
