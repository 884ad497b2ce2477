import { resolve } from 'node:path';
import { defineConfig } from 'vite';

// Two pages: the dashboard (index.html) and the trading page (trade.html). `npm run dev`
// proxies the API to a running `bourse demo` on 127.0.0.1:8080.
export default defineConfig({
  build: {
    outDir: 'dist',
    emptyOutDir: true,
    rollupOptions: {
      input: {
        dashboard: resolve(__dirname, 'index.html'),
        trade: resolve(__dirname, 'trade.html'),
      },
    },
  },
  server: {
    proxy: {
      '/v1': { target: 'http://127.0.0.1:8080', ws: true },
      '/openapi.json': 'http://127.0.0.1:8080',
    },
  },
});
