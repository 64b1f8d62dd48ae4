package main

import (
	"encoding/xml"
	"strings"
)

// ParseJUnit reads pytest's --junitxml report into test id → status
// (passed, failed, error, skipped, xfail). Ids are pytest node ids,
// "path/to/test_file.py::Class::test_name".
func ParseJUnit(b []byte) (map[string]string, error) {
	var doc struct {
		Suites []suite `xml:"testsuite"`
		suite
	}
	if err := xml.Unmarshal(b, &doc); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, s := range append(doc.Suites, doc.suite) {
		for _, c := range s.Cases {
			out[nodeID(c.Classname, c.Name)] = c.status()
		}
	}
	return out, nil
}

type suite struct {
	Cases []testCase `xml:"testcase"`
}

type testCase struct {
	Classname string    `xml:"classname,attr"`
	Name      string    `xml:"name,attr"`
	Failure   *struct{} `xml:"failure"`
	Error     *struct{} `xml:"error"`
	Skipped   *struct {
		Type    string `xml:"type,attr"`
		Message string `xml:"message,attr"`
	} `xml:"skipped"`
}

func (c testCase) status() string {
	switch {
	case c.Error != nil:
		return "error"
	case c.Failure != nil:
		return "failed"
	case c.Skipped != nil && (c.Skipped.Type == "pytest.xfail" || strings.HasPrefix(c.Skipped.Message, "xfail")):
		return "xfail"
	case c.Skipped != nil:
		return "skipped"
	}
	return "passed"
}

// nodeID turns junit's classname ("tests.test_ops" or
// "tests.test_ops.TestClass") and name into a pytest node id. The module
// part is the longest dotted prefix that names a test file; pytest's
// classnames do not say where the module ends, so a segment starting with
// an upper-case letter is taken as a class.
func nodeID(classname, name string) string {
	parts := strings.Split(classname, ".")
	i := len(parts)
	for i > 0 && len(parts[i-1]) > 0 && parts[i-1][0] >= 'A' && parts[i-1][0] <= 'Z' {
		i--
	}
	id := strings.Join(parts[:i], "/") + ".py"
	for _, cls := range parts[i:] {
		id += "::" + cls
	}
	return id + "::" + name
}
