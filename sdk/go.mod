module github.com/proctor-dev/proctor/sdk

go 1.24
