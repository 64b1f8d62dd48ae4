package archive

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
)

// Chown rewrites every header of an archive (plain or gzip, already
// checked) to uid:gid without owner names, as a plain tar stream: what an
// extraction as root then gives the sandbox's user.
func Chown(data []byte, uid, gid int) ([]byte, error) {
	tr, err := Reader(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	tw := tar.NewWriter(&out)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read archive: %w", err)
		}
		h.Uid, h.Gid, h.Uname, h.Gname = uid, gid, "", ""
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}
