package croads.catalyst;

import java.util.Arrays;

import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.codegen.CodeBlock;
import org.apache.spark.sql.catalyst.expressions.codegen.ExprCode;
import org.apache.spark.sql.catalyst.expressions.codegen.JavaCode;

import scala.collection.immutable.List$;
import scala.collection.immutable.Seq;

/**
 * A Catalyst expression written in Java. Catalyst treats an expression as a Scala case class: its arity, elements,
 * equality and hash (which plans compare and cache by) come here from one list, {@link #arguments()}, the
 * constructor's arguments that make the expression what it is, in order.
 */
public abstract class JavaExpression extends Expression {

    /** The arguments that tell this expression apart from another of its class, in the order of its constructor. */
    protected abstract Object[] arguments();

    /** {@code ev} with {@code code} as its code block (Java source that sets {@code ev}'s value and null flag). */
    protected static ExprCode withCode(ExprCode ev, String code) {
        Seq<String> parts = List$.MODULE$.<String>empty().$colon$colon(code);
        return ev.copy(new CodeBlock(parts, List$.MODULE$.<JavaCode>empty()), ev.isNull(), ev.value());
    }

    @Override
    public final int productArity() {
        return arguments().length;
    }

    @Override
    public final Object productElement(int n) {
        Object[] arguments = arguments();
        if (n < 0 || n >= arguments.length) {
            throw new IndexOutOfBoundsException(n);
        }
        return arguments[n];
    }

    @Override
    public final boolean canEqual(Object other) {
        return other != null && other.getClass() == getClass();
    }

    @Override
    public final boolean equals(Object other) {
        return canEqual(other) && Arrays.equals(arguments(), ((JavaExpression) other).arguments());
    }

    @Override
    public final int hashCode() {
        return Arrays.hashCode(arguments());
    }
}
