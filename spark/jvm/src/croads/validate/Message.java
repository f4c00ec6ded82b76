package croads.validate;

import com.fasterxml.jackson.databind.JsonNode;
import java.math.BigDecimal;
import java.util.List;

/** A property mandatory in every message ({@code type} null) or for one messageType. */
final class Mandatory implements java.io.Serializable {
    private static final long serialVersionUID = 1L;
    final String type;
    final int property;
    final String requirement;
    final String expected;

    Mandatory(JsonNode m, TableChecksUdf.Rules rules) {
        type = m.hasNonNull("messageType") ? m.get("messageType").asText() : null;
        property = rules.index(m.get("name").asText());
        requirement = m.get("requirement").asText();
        expected = m.get("expected").asText();
    }
}

/** A rule across properties (publicationId, cancellation, shards): property_rules.py's {@code _cross_findings}. */
final class Cross implements java.io.Serializable {
    private static final long serialVersionUID = 1L;
    final String type;
    final int first;
    final int second;
    final String separator;
    final String requirement;
    final String otherRequirement;
    final String[] expected;
    final String messageType;
    final BigDecimal value;

    Cross(JsonNode c, TableChecksUdf.Rules rules) {
        type = c.get("type").asText();
        first = rules.index(c.get("first").asText());
        second = rules.index(c.get("second").asText());
        separator = c.path("separator").asText();
        requirement = c.get("requirement").asText();
        otherRequirement = c.path("otherRequirement").asText();
        expected = TableChecksUdf.texts(c.get("expected"));
        messageType = c.path("messageType").asText();
        value = new BigDecimal(c.path("value").asText("0"));
    }
}

/**
 * One message's properties (values and JSON kinds by the tables' order) and the findings of
 * property_rules.py's {@code findings_sql} over them, in its order.
 */
final class Message {
    static final String ABSENT = "absent";
    /** The problem of a value of another kind. */
    private static final Object KIND = new Object();
    private final TableChecksUdf.Rules rules;
    private final String[] values;
    private final String[] kinds;
    /** Each property's {@link #valid}, once known: 0 not yet, 1 valid, 2 not. */
    private final byte[] validity;

    /** {@code values}, {@code kinds}: each property's value and JSON kind, by the tables' order (null: absent). */
    Message(TableChecksUdf.Rules rules, String[] values, String[] kinds) {
        this.rules = rules;
        this.values = values;
        this.kinds = kinds;
        this.validity = new byte[rules.properties.length];
    }

    boolean present(int i) {
        return kinds[i] != null;
    }

    boolean kindOk(int i) {
        return rules.properties[i].kind.equals(kinds[i]);
    }

    /** Present, of its kind and passing its value tests. */
    boolean valid(int i) {
        if (validity[i] == 0) {
            validity[i] = present(i) && firstProblem(i) == null ? (byte) 1 : (byte) 2;
        }
        return validity[i] == 1;
    }

    /** The first problem of a present property: null (none), or its failing test (the kind's: {@link #KIND}). */
    private Object firstProblem(int i) {
        if (!kindOk(i)) {
            return KIND;
        }
        for (TableChecksUdf.Test test : rules.properties[i].tests) {
            if (test.bad(values[i])) {
                return test;
            }
        }
        return null;
    }

    String observed(int i) {
        return rules.properties[i].name + "=" + (values[i] == null ? "null" : values[i]);
    }

    void findings(List<String[]> found) {
        String messageType = valid(rules.messageType) ? values[rules.messageType] : null;
        for (int i = 0; i < rules.properties.length; i++) {
            String[] f = propertyFinding(i, messageType);
            if (f != null) {
                found.add(f);
            }
        }
        for (Mandatory m : rules.mandatory) {  // every message's first, then by messageType (the spec's order)
            if ((m.type == null || m.type.equals(messageType)) && !present(m.property)) {
                found.add(TableChecksUdf.finding(rules.properties[m.property].name, m.requirement, ABSENT, m.expected));
            }
        }
        for (Cross c : rules.cross) {
            switch (c.type) {
                case "publicationId":
                    add(found, publicationId(c));
                    break;
                case "cancellation":
                    add(found, cancellation(c, messageType));
                    break;
                case "shard":
                    add(found, shardMissing(c));
                    add(found, shardWrong(c));
                    break;
                default:
                    throw new IllegalStateException("unknown rule " + c.type);
            }
        }
    }

    private static void add(List<String[]> found, String[] finding) {
        if (finding != null) {
            found.add(finding);
        }
    }

    /** The first problem of one property (its kind, then its value tests in order), or null. */
    private String[] propertyFinding(int i, String messageType) {
        if (!present(i)) {
            validity[i] = 2;
            return null;
        }
        Object problem = firstProblem(i);
        validity[i] = problem == null ? (byte) 1 : (byte) 2;
        if (problem == null) {
            return null;
        }
        TableChecksUdf.Property p = rules.properties[i];
        if (problem == KIND) {
            return TableChecksUdf.finding(p.name, p.requirementFor(messageType), p.name + " is JSON " + kinds[i],
                    p.expectedKind);
        }
        TableChecksUdf.Test test = (TableChecksUdf.Test) problem;
        return TableChecksUdf.finding(p.name, test.own ? p.requirementFor(messageType) : test.requirement,
                observed(i), test.expected);
    }

    /** first: the publicationId; second: the publisherId. expected: [malformed, not the publisher's]. */
    private String[] publicationId(Cross c) {
        String value = values[c.first];
        if (!valid(c.first) || value == null) {
            return null;
        }
        String name = rules.properties[c.first].name;
        int at = value.indexOf(c.separator);
        if (at <= 0 || at + c.separator.length() == value.length()) {
            return TableChecksUdf.finding(name, c.requirement, observed(c.first), c.expected[0]);
        }
        if (valid(c.second) && !value.substring(0, at).equals(values[c.second])) {
            return TableChecksUdf.finding(name, c.requirement, observed(c.first), c.expected[1]);
        }
        return null;
    }

    private String[] cancellation(Cross c, String messageType) {
        if (!c.messageType.equals(messageType) || !valid(c.first) || !valid(c.second)) {
            return null;
        }
        BigDecimal first = TableChecksUdf.toDecimal(values[c.first]);
        BigDecimal second = TableChecksUdf.toDecimal(values[c.second]);
        if (first == null || second == null || (first.compareTo(c.value) == 0) == (second.compareTo(c.value) == 0)) {
            return null;
        }
        return TableChecksUdf.finding(rules.properties[c.second].name, c.requirement, observed(c.second), c.expected[0]);
    }

    /** first: shardId; second: shardCount; requirement: the first shard's, otherRequirement: the count's;
     * expected: [absent, below the first, above the count]. */
    private String[] shardMissing(Cross c) {
        if (!valid(c.first) && valid(c.second) && !present(c.first)) {
            return TableChecksUdf.finding(rules.properties[c.first].name, c.otherRequirement, ABSENT, c.expected[0]);
        }
        return null;
    }

    private String[] shardWrong(Cross c) {
        if (!valid(c.first)) {
            return null;
        }
        BigDecimal id = TableChecksUdf.toDecimal(values[c.first]);
        if (id == null) {
            return null;
        }
        String name = rules.properties[c.first].name;
        if (id.compareTo(c.value) < 0) {
            return TableChecksUdf.finding(name, c.requirement, observed(c.first), c.expected[1]);
        }
        BigDecimal count = valid(c.second) ? TableChecksUdf.toDecimal(values[c.second]) : null;
        if (count != null && id.compareTo(count) > 0) {
            return TableChecksUdf.finding(name, c.otherRequirement, observed(c.first), c.expected[2]);
        }
        return null;
    }
}
