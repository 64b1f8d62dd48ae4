package dataset

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Hub downloads Hugging Face datasets through the Hub's HTTP API into an
// on-disk cache. Endpoint and Token default to $HF_ENDPOINT and $HF_TOKEN.
type Hub struct {
	Endpoint string
	Token    string
	CacheDir string
	Client   *http.Client
}

// NewHub makes a Hub from the environment.
func NewHub(cacheDir string) *Hub {
	ep := os.Getenv("HF_ENDPOINT")
	if ep == "" {
		ep = "https://huggingface.co"
	}
	return &Hub{Endpoint: strings.TrimRight(ep, "/"), Token: os.Getenv("HF_TOKEN"), CacheDir: cacheDir,
		Client: &http.Client{Timeout: 10 * time.Minute}}
}

// Fetch downloads the data files of hf://owner/name[@revision] (once; a
// cached copy is used offline) and returns the local folder.
func (h *Hub) Fetch(ctx context.Context, source string) (string, error) {
	repo, rev, _ := strings.Cut(strings.TrimPrefix(source, "hf://"), "@")
	if rev == "" {
		rev = "main"
	}
	if strings.Count(repo, "/") != 1 || strings.Contains(repo, "..") || strings.Contains(rev, "/") {
		return "", fmt.Errorf("dataset %s: want hf://owner/name[@revision]", source)
	}
	dir := filepath.Join(h.CacheDir, "datasets", strings.ReplaceAll(repo, "/", "--"), rev)
	if _, err := os.Stat(filepath.Join(dir, ".complete")); err == nil {
		return dir, nil
	}
	files, err := h.list(ctx, repo, rev)
	if err != nil {
		return "", fmt.Errorf("dataset %s: %w", source, err)
	}
	if len(files) == 0 {
		return "", fmt.Errorf("dataset %s: no .json, .jsonl or .parquet files in the repository", source)
	}
	for _, f := range files {
		if err := h.download(ctx, repo, rev, f, filepath.Join(dir, filepath.FromSlash(f))); err != nil {
			return "", fmt.Errorf("dataset %s: %w", source, err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, ".complete"), nil, 0o644); err != nil {
		return "", err
	}
	return dir, nil
}

func (h *Hub) get(ctx context.Context, u string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	if h.Token != "" {
		req.Header.Set("Authorization", "Bearer "+h.Token)
	}
	resp, err := h.Client.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		hint := ""
		if resp.StatusCode == 401 || resp.StatusCode == 403 {
			hint = " (set HF_TOKEN for gated or private datasets)"
		}
		return nil, fmt.Errorf("GET %s: %s%s", u, resp.Status, hint)
	}
	return resp, nil
}

// list asks the tree API for the repository's data files.
func (h *Hub) list(ctx context.Context, repo, rev string) ([]string, error) {
	u := fmt.Sprintf("%s/api/datasets/%s/tree/%s?recursive=true", h.Endpoint, repo, url.PathEscape(rev))
	resp, err := h.get(ctx, u)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var entries []struct {
		Type string `json:"type"`
		Path string `json:"path"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&entries); err != nil {
		return nil, fmt.Errorf("file list: %w", err)
	}
	var files []string
	for _, e := range entries {
		if e.Type == "file" && isData(e.Path) && !strings.Contains(e.Path, "..") && !strings.HasPrefix(e.Path, "/") {
			files = append(files, e.Path)
		}
	}
	return files, nil
}

// download writes one file atomically (temp file, then rename).
func (h *Hub) download(ctx context.Context, repo, rev, file, dst string) error {
	if _, err := os.Stat(dst); err == nil {
		return nil
	}
	u := fmt.Sprintf("%s/datasets/%s/resolve/%s/%s", h.Endpoint, repo, url.PathEscape(rev), file)
	resp, err := h.get(ctx, u)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".download-*")
	if err != nil {
		return err
	}
	_, err = io.Copy(tmp, resp.Body)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), dst)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("download %s: %w", file, err)
	}
	return nil
}
