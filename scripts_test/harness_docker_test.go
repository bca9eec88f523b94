package scripts_test

// The Docker fallback of the harness, kept apart: it is the only code that
// uses testcontainers-go, and it runs only when neither REDIS_URL nor a
// redis-server binary is there.

import (
	"context"
	"fmt"
	"time"

	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"
)

// harnessDockerImage is the image of the Docker fallback: the oldest Redis
// minor the project supports that still receives fixes.
const harnessDockerImage = "redis:7.2"

// harnessDockerRedis starts a standalone harnessDockerImage container and
// returns its redis:// URL and a function that removes it. It returns an
// error without starting anything when no Docker daemon answers.
func harnessDockerRedis() (url string, stop func() error, err error) {
	if err := harnessDockerHealthy(); err != nil {
		return "", nil, err
	}
	// The first run may pull the image.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ctr, err := testcontainers.Run(ctx, harnessDockerImage,
		testcontainers.WithExposedPorts("6379/tcp"),
		testcontainers.WithCmd("redis-server", "--save", "", "--appendonly", "no"),
		testcontainers.WithWaitStrategy(wait.ForLog("Ready to accept connections")),
	)
	if err != nil {
		if ctr != nil {
			_ = testcontainers.TerminateContainer(ctr)
		}
		return "", nil, fmt.Errorf("docker: start %s: %w", harnessDockerImage, err)
	}
	url, err = ctr.PortEndpoint(ctx, "6379/tcp", "redis")
	if err != nil {
		_ = testcontainers.TerminateContainer(ctr)
		return "", nil, fmt.Errorf("docker: address of %s: %w", harnessDockerImage, err)
	}
	return url, func() error { return testcontainers.TerminateContainer(ctr) }, nil
}

// harnessDockerHealthy reports whether a Docker daemon answers. testcontainers
// panics in some set-ups without Docker; that counts as "no".
func harnessDockerHealthy() (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("docker: %v", r)
		}
	}()
	provider, err := testcontainers.ProviderDefault.GetProvider()
	if err != nil {
		return fmt.Errorf("docker: %w", err)
	}
	defer provider.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := provider.Health(ctx); err != nil {
		return fmt.Errorf("docker: %w", err)
	}
	return nil
}
