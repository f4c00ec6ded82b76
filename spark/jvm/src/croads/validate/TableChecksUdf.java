package croads.validate;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.math.BigDecimal;
import java.math.RoundingMode;
import java.util.HashSet;
import java.util.List;
import java.util.Locale;
import java.util.Set;
import java.util.regex.Pattern;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/**
 * Tables 1-7 of the IP profile as data, and their registration as one Spark SQL function ({@link TableChecks}):
 * (the values struct, the JSON kinds struct, the names of the other properties) to
 * {@code array<struct<property, rule, observed, expected>>}, every problem of one message's properties (empty:
 * none; null when the names are null).
 *
 * <p>The tables come as data (JSON, built by spark/property_rules.py from the profile), and {@link Message}
 * evaluates exactly what that module's SQL ({@code findings_sql}) does, clause by clause and with Spark's
 * semantics: Java regular expressions found anywhere in the value (RLIKE), integers as
 * {@code try_cast(v AS DECIMAL(38,0))}, floats as {@code try_cast(v AS DOUBLE)}, a null test as false (a range
 * and a publisherId test as true). A differential test holds the two together. The SQL, as generated Java,
 * was a 231 KB class to compile in every new JVM and 29 KB of text to parse and analyse in every validate.
 */
public final class TableChecksUdf {
    private TableChecksUdf() {
    }

    /** Registers the function as {@code name} in the session; {@code spec}: the tables as JSON (property_rules.py). */
    public static void register(org.apache.spark.sql.classic.SparkSession spark, String name, String spec) {
        Rules rules = rules(spec);  // a bad spec fails here, not in a task
        spark.sessionState().functionRegistry().createOrReplaceTempFunction(name, arguments -> {
            if (arguments.size() != 3) {
                throw new IllegalArgumentException(name + " takes 3 arguments (values, kinds, other names), not "
                        + arguments.size());
            }
            return new TableChecks(name, spec, rules, arguments.apply(0), arguments.apply(1), arguments.apply(2));
        }, "java_udf");
    }

    static DataType returnType() {
        StructField[] fields = new StructField[4];
        String[] names = {"property", "rule", "observed", "expected"};
        for (int i = 0; i < names.length; i++) {
            fields[i] = DataTypes.createStructField(names[i], DataTypes.StringType, true);
        }
        return DataTypes.createArrayType(DataTypes.createStructType(fields), true);
    }

    static Rules rules(String spec) {
        try {
            return new Rules(new ObjectMapper().readTree(spec));
        } catch (IOException error) {
            throw new UncheckedIOException(error);
        }
    }

    /** One test of a value: the SQL of property_rules.py's value checks. */
    static final class Test implements java.io.Serializable {
        private static final long serialVersionUID = 1L;
        final String type;
        final String requirement;
        final String expected;
        /** the requirement is the property's own (its by-type requirement applies) */
        final boolean own;
        final Pattern regex;
        final Set<String> values = new HashSet<>();
        final BigDecimal low;
        final BigDecimal high;
        final BigDecimal also;
        final double lowDouble;
        final double highDouble;
        final int letters;
        final int maxDigits;

        Test(JsonNode t) {
            type = t.get("type").asText();
            requirement = t.get("requirement").asText();
            expected = t.get("expected").asText();
            own = t.get("own").asBoolean();
            regex = t.hasNonNull("regex") ? Pattern.compile(t.get("regex").asText()) : null;
            if (t.has("values")) {
                t.get("values").forEach(v -> values.add(v.asText()));
            }
            boolean floating = "floatRange".equals(type);
            low = t.hasNonNull("low") && !floating ? new BigDecimal(t.get("low").asText()) : null;
            high = t.hasNonNull("high") && !floating ? new BigDecimal(t.get("high").asText()) : null;
            also = t.hasNonNull("also") ? new BigDecimal(t.get("also").asText()) : null;
            lowDouble = floating ? Double.parseDouble(t.get("low").asText()) : 0;
            highDouble = floating ? Double.parseDouble(t.get("high").asText()) : 0;
            letters = t.path("letters").asInt();
            maxDigits = t.path("maxDigits").asInt();
        }

        /** {@code coalesce(bad, false)} of the SQL test over {@code value}. */
        boolean bad(String value) {
            switch (type) {
                case "nonEmpty":
                    return value != null && value.isEmpty();
                case "oneOf":
                    return value != null && !values.contains(value);
                case "pattern":
                    return value != null && !regex.matcher(value).find();
                case "floatRange": {
                    Double d = toDouble(value);
                    return d == null || !(d >= lowDouble && d <= highDouble);
                }
                case "intRange": {
                    BigDecimal n = toDecimal(value);
                    return n == null || !((also != null && n.compareTo(also) == 0)
                            || (n.compareTo(low) >= 0 && n.compareTo(high) <= 0));
                }
                case "publisherId": {
                    if (value == null) {
                        return true;
                    }
                    if (!regex.matcher(value).find()) {
                        return true;
                    }
                    BigDecimal n = toDecimal(substring(value, letters + 1, maxDigits + 5));
                    return n == null || n.compareTo(high) > 0;
                }
                default:
                    throw new IllegalStateException("unknown test " + type);
            }
        }
    }

    /** A property of the tables. */
    static final class Property implements java.io.Serializable {
        private static final long serialVersionUID = 1L;
        final String name;
        final String kind;
        final String requirement;
        final String expectedKind;
        final String[][] byTypeTypes;
        final String[] byTypeRequirement;
        final Test[] tests;

        Property(JsonNode p) {
            name = p.get("name").asText();
            kind = p.get("kind").asText();
            requirement = p.get("requirement").asText();
            expectedKind = p.get("expectedKind").asText();
            JsonNode byType = p.get("byType");
            byTypeTypes = new String[byType.size()][];
            byTypeRequirement = new String[byType.size()];
            for (int i = 0; i < byType.size(); i++) {
                byTypeTypes[i] = texts(byType.get(i).get("types"));
                byTypeRequirement[i] = byType.get(i).get("requirement").asText();
            }
            JsonNode t = p.get("tests");
            tests = new Test[t.size()];
            for (int i = 0; i < t.size(); i++) {
                tests[i] = new Test(t.get(i));
            }
        }

        /** The requirement of a problem of its own, for a message of {@code messageType} (null: not valid). */
        String requirementFor(String messageType) {
            if (messageType != null) {
                for (int i = 0; i < byTypeTypes.length; i++) {
                    for (String type : byTypeTypes[i]) {
                        if (type.equals(messageType)) {
                            return byTypeRequirement[i];
                        }
                    }
                }
            }
            return requirement;
        }
    }

    /** The tables: the properties (in the struct's order of names) and the rules over them. */
    static final class Rules implements java.io.Serializable {
        private static final long serialVersionUID = 1L;
        final Property[] properties;
        final Pattern customName;
        final String customRequirement;
        final String customForm;
        final int messageType;
        final Mandatory[] mandatory;
        final Cross[] cross;

        Rules(JsonNode root) {
            JsonNode p = root.get("properties");
            properties = new Property[p.size()];
            for (int i = 0; i < p.size(); i++) {
                properties[i] = new Property(p.get(i));
            }
            JsonNode custom = root.get("custom");
            customName = Pattern.compile(custom.get("regex").asText());
            customRequirement = custom.get("requirement").asText();
            customForm = custom.get("form").asText();
            messageType = index(root.get("messageType").asText());
            JsonNode m = root.get("mandatory");
            mandatory = new Mandatory[m.size()];
            for (int i = 0; i < m.size(); i++) {
                mandatory[i] = new Mandatory(m.get(i), this);
            }
            JsonNode c = root.get("cross");
            cross = new Cross[c.size()];
            for (int i = 0; i < c.size(); i++) {
                cross[i] = new Cross(c.get(i), this);
            }
        }

        /** Where each property is in a struct of {@code schema} (-1: not there). */
        int[] order(StructType schema) {
            List<String> names = java.util.Arrays.asList(schema.fieldNames());
            int[] found = new int[properties.length];
            for (int i = 0; i < properties.length; i++) {
                found[i] = names.indexOf(properties[i].name);
            }
            return found;
        }

        int index(String name) {
            for (int i = 0; i < properties.length; i++) {
                if (properties[i].name.equals(name)) {
                    return i;
                }
            }
            throw new IllegalArgumentException("no property " + name);
        }
    }

    static String[] texts(JsonNode array) {
        String[] out = new String[array.size()];
        for (int i = 0; i < out.length; i++) {
            out[i] = array.get(i).asText();
        }
        return out;
    }

    /** {@code try_cast(value AS DECIMAL(38,0))}: null when it is no number or does not fit. */
    static BigDecimal toDecimal(String value) {
        if (value == null) {
            return null;
        }
        try {
            BigDecimal n = new BigDecimal(value.strip()).setScale(0, RoundingMode.HALF_UP);
            return n.precision() > 38 ? null : n;
        } catch (NumberFormatException | ArithmeticException error) {
            return null;
        }
    }

    /** {@code try_cast(value AS DOUBLE)}: Java's parse, then Spark's special words; null when neither. */
    static Double toDouble(String value) {
        if (value == null) {
            return null;
        }
        try {
            return Double.parseDouble(value);
        } catch (NumberFormatException error) {
            switch (value.strip().toLowerCase(Locale.ROOT)) {
                case "inf": case "+inf": case "infinity": case "+infinity":
                    return Double.POSITIVE_INFINITY;
                case "-inf": case "-infinity":
                    return Double.NEGATIVE_INFINITY;
                case "nan": case "+nan": case "-nan":
                    return Double.NaN;
                default:
                    return null;
            }
        }
    }

    /** SQL {@code substring(value, from, length)}: 1-based, in characters (code points). */
    static String substring(String value, int from, int length) {
        int count = value.codePointCount(0, value.length());
        if (from > count) {
            return "";
        }
        int start = value.offsetByCodePoints(0, from - 1);
        int end = value.offsetByCodePoints(start, Math.min(length, count - from + 1));
        return value.substring(start, end);
    }

    static String[] finding(String property, String rule, String observed, String expected) {
        return new String[] {property, rule, observed, expected};
    }
}
