package croads.validate;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.List;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.expressions.codegen.CodegenContext;
import org.apache.spark.sql.catalyst.expressions.codegen.ExprCode;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.catalyst.util.GenericArrayData;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;

import scala.collection.immutable.IndexedSeq;
import scala.collection.immutable.List$;
import scala.collection.immutable.Seq;

import croads.catalyst.JavaExpression;

/**
 * Tables 1-7 ({@link TableChecksUdf}) as a Spark SQL expression: (the values struct, the JSON kinds struct, the
 * names of the other properties) to {@code array<struct<property, rule, observed, expected>>}.
 *
 * <p>An expression rather than a user-defined function: it reads Spark's internal rows (the structs' UTF-8
 * strings by their place, found once from the structs' types) and the generated code calls it directly. As a
 * function, every received message's two structs of 23 strings each were converted to external {@code Row}s and
 * the names to a Scala sequence before the call, and its result converted back.
 */
public final class TableChecks extends JavaExpression implements Serializable {
    private static final long serialVersionUID = 1L;
    private static final ArrayData NONE = new GenericArrayData(new Object[0]);

    private final String name;
    private final String spec;
    private final TableChecksUdf.Rules rules;
    private final Expression values;
    private final Expression kinds;
    private final Expression others;
    private final Seq<Expression> children;
    /** Where each property is in the values' and the kinds' structs (-1: not there), once their types are known. */
    private transient int[] valuesOrder;
    private transient int[] kindsOrder;

    TableChecks(String name, String spec, TableChecksUdf.Rules rules, Expression values, Expression kinds,
                Expression others) {
        this.name = name;
        this.spec = spec;
        this.rules = rules;
        this.values = values;
        this.kinds = kinds;
        this.others = others;
        this.children = List$.MODULE$.<Expression>empty().$colon$colon(others).$colon$colon(kinds).$colon$colon(values);
    }

    /** The findings of one message (called by the generated code); null when the names are null. */
    public ArrayData findings(InternalRow valueRow, InternalRow kindRow, ArrayData names) {
        if (names == null) {
            return null;
        }
        if (valuesOrder == null) {  // the same in every thread: a race computes it twice
            kindsOrder = rules.order((StructType) kinds.dataType());
            valuesOrder = rules.order((StructType) values.dataType());
        }
        List<String[]> found = new ArrayList<>(0);
        for (int i = 0; i < names.numElements(); i++) {
            if (!names.isNullAt(i)) {
                String other = names.getUTF8String(i).toString();
                if (!rules.customName.matcher(other).find()) {
                    found.add(TableChecksUdf.finding(other, rules.customRequirement, other, rules.customForm));
                }
            }
        }
        new Message(rules, texts(valueRow, valuesOrder), texts(kindRow, kindsOrder)).findings(found);
        if (found.isEmpty()) {
            return NONE;
        }
        Object[] rows = new Object[found.size()];
        for (int i = 0; i < rows.length; i++) {
            String[] f = found.get(i);
            rows[i] = new GenericInternalRow(new Object[] {utf8(f[0]), utf8(f[1]), utf8(f[2]), utf8(f[3])});
        }
        return new GenericArrayData(rows);
    }

    /** The struct's strings in the tables' order of properties (null: absent, or no struct). */
    private String[] texts(InternalRow row, int[] order) {
        String[] out = new String[order.length];
        if (row != null) {
            for (int i = 0; i < out.length; i++) {
                int at = order[i];
                out[i] = at < 0 || row.isNullAt(at) ? null : row.getUTF8String(at).toString();
            }
        }
        return out;
    }

    private static UTF8String utf8(String text) {
        return text == null ? null : UTF8String.fromString(text);
    }

    @Override
    public Seq<Expression> children() {
        return children;
    }

    @Override
    public DataType dataType() {
        return TableChecksUdf.returnType();
    }

    @Override
    public boolean nullable() {
        return true;
    }

    /** Expensive, as a user-defined function is: evaluated once where it stands, not copied into its readers. */
    @Override
    public boolean expensive() {
        return true;
    }

    @Override
    public Object eval(InternalRow input) {
        return findings((InternalRow) values.eval(input), (InternalRow) kinds.eval(input), (ArrayData) others.eval(input));
    }

    @Override
    public ExprCode doGenCode(CodegenContext ctx, ExprCode ev) {
        String self = ctx.addReferenceObj("tableChecks", this, TableChecks.class.getName());
        ExprCode v = values.genCode(ctx);
        ExprCode k = kinds.genCode(ctx);
        ExprCode o = others.genCode(ctx);
        String array = ArrayData.class.getName();
        String code = v.code() + "\n" + k.code() + "\n" + o.code() + "\n"
                + array + " " + ev.value() + " = " + self + ".findings(" + v.isNull() + " ? null : " + v.value() + ", "
                + k.isNull() + " ? null : " + k.value() + ", " + o.isNull() + " ? null : " + o.value() + ");\n"
                + "boolean " + ev.isNull() + " = " + ev.value() + " == null;";
        return withCode(ev, code);
    }

    @Override
    protected Object[] arguments() {
        return new Object[] {values, kinds, others, name, spec};
    }

    @Override
    public Expression withNewChildrenInternal(IndexedSeq<Expression> newChildren) {
        return new TableChecks(name, spec, rules, newChildren.apply(0), newChildren.apply(1), newChildren.apply(2));
    }

    @Override
    public String prettyName() {
        return name;
    }
}
